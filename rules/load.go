package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"gopkg.in/yaml.v3"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/failurejson"
)

// ErrInvalid is wrapped by every error about a rule file's content.
var ErrInvalid = errors.New("invalid rule file")

// ErrCaseFailed is wrapped by the error of a golden case that does not hold.
var ErrCaseFailed = errors.New("golden case failed")

// Error is one problem in a rule file, with its place. Its text reads
// `file:line:col: rule "name": field: message`.
type Error struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int // 1-based; 0 when unknown
	Rule   string
	Field  string // "when", "class", "cases[2]", ...
	Msg    string
	Err    error // ErrInvalid or ErrCaseFailed
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Rule != "" {
		fmt.Fprintf(&b, "rule %q: ", e.Rule)
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error {
	if e.Err == nil {
		return ErrInvalid
	}
	return e.Err
}

// Windows a rule may name.
var windowNames = []string{"minute", "hour", "day", "week", "month"}

// windowGroups lists the windows limitWindow() tells apart, longest first.
var windowGroups = []string{"month", "week", "day", "hour", "minute"}

// predefinedLists are lists every rule file may name in has()/words(); they are
// also what limitWindow() reads.
var predefinedLists = map[string][]string{
	"minuteWords": {"per minute", "per min", "per 60s", "per 60 seconds", "by minute", "每分钟", "分钟内"},
	"minuteAbbr":  {"tpm", "rpm", "ipm", "qpm", "/min", "/minute"},
	"hourWords":   {"per hour", "hourly", "5 hour", "five hour", "每小时", "5小时", "小时内"},
	"hourAbbr":    {"/hour", "/hr"},
	"dayWords":    {"per day", "daily", "per 24 hours", "per 86400", "by day", "每日", "每天", "今日", "当日", "日流控", "日调用", "日限额"},
	"dayAbbr":     {"tpd", "rpd", "/day"},
	"weekWords":   {"per week", "weekly", "每周", "本周"},
	"weekAbbr":    {"/week"},
	"monthWords":  {"per month", "monthly", "this month", "每月", "本月", "月度"},
	"monthAbbr":   {"/month"},
}

// compileCtx holds what the expressions of one rule set share: the phrase table,
// the phrase groups, the regexps, the file's lists.
type compileCtx struct {
	phrases   phraseTable
	groups    []group
	groupKeys map[string]int
	regexes   []*regexp.Regexp
	regexKeys map[string]int
	lists     map[string][]string
	needText  bool
}

// group is one has()/words()/hasAll() call: phrase ids, any or all.
type group struct {
	ids []int32
	all bool
}

func (cc *compileCtx) group(ids []int32, all bool) int {
	key := fmt.Sprint(all, ids)
	if g, ok := cc.groupKeys[key]; ok {
		return g
	}
	cc.groups = append(cc.groups, group{ids: ids, all: all})
	cc.groupKeys[key] = len(cc.groups) - 1
	return len(cc.groups) - 1
}

func (cc *compileCtx) regex(pattern string, caseless bool) (int, error) {
	key := strconv.FormatBool(caseless) + pattern
	if i, ok := cc.regexKeys[key]; ok {
		return i, nil
	}
	p := pattern
	if caseless {
		// The subject is already lowercase: lowering the pattern's literals keeps
		// the literal-prefix search that (?i) would turn off.
		p = lowerLiterals(pattern)
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return 0, err
	}
	cc.regexes = append(cc.regexes, re)
	cc.regexKeys[key] = len(cc.regexes) - 1
	return len(cc.regexes) - 1, nil
}

// lowerLiterals rewrites a pattern so that its literal letters are lowercase
// (escapes and classes such as \S or [A-Z] keep their meaning). A pattern that
// does not parse is returned as is, for regexp.Compile to report.
func lowerLiterals(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return pattern
	}
	var walk func(*syntax.Regexp)
	walk = func(r *syntax.Regexp) {
		if r.Op == syntax.OpLiteral {
			for i, c := range r.Rune {
				r.Rune[i] = unicode.ToLower(c)
			}
		}
		for _, s := range r.Sub {
			walk(s)
		}
	}
	walk(re)
	return re.String()
}

// patcher rewrites the helper calls that take constants into indexed calls on
// precompiled phrase groups and regexps, so nothing is compiled per call.
type patcher struct {
	cc   *compileCtx
	errs []patchErr
}

type patchErr struct {
	from int // rune offset in the expression
	msg  string
}

func (p *patcher) fail(n ast.Node, format string, args ...any) {
	p.errs = append(p.errs, patchErr{from: n.Location().From, msg: fmt.Sprintf(format, args...)})
}

func (p *patcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		if n.Value == "text" {
			p.cc.needText = true
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return
		}
		switch id.Value {
		case "has", "words", "hasAll":
			if len(n.Arguments) == 0 {
				p.fail(n, "%s() needs at least one phrase", id.Value)
				return
			}
			var ids []int32
			for _, a := range n.Arguments {
				phrases, ok := p.constStrings(a)
				if !ok {
					p.fail(a, "%s() takes constant strings, lists of them, or list names (have: %s); to test a computed string use `contains`", id.Value, p.listNames())
					return
				}
				for _, ph := range phrases {
					pid, err := p.cc.phrases.add(ph, id.Value == "words")
					if err != nil {
						p.fail(a, "%s", err)
						return
					}
					ids = append(ids, int32(pid))
				}
			}
			g := p.cc.group(ids, id.Value == "hasAll")
			ast.Patch(node, &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: "__has"},
				Arguments: []ast.Node{&ast.IntegerNode{Value: g}},
			})
		case "match":
			if len(n.Arguments) < 1 || len(n.Arguments) > 2 {
				p.fail(n, "match() takes a pattern, or a string and a pattern")
				return
			}
			last := n.Arguments[len(n.Arguments)-1]
			pat, ok := last.(*ast.StringNode)
			if !ok {
				p.fail(last, "match() takes a constant pattern; for a computed one use `matches`")
				return
			}
			re, err := p.cc.regex(pat.Value, len(n.Arguments) == 1)
			if err != nil {
				p.fail(last, "bad pattern %q: %v", pat.Value, err)
				return
			}
			if len(n.Arguments) == 1 {
				ast.Patch(node, &ast.CallNode{
					Callee:    &ast.IdentifierNode{Value: "__match"},
					Arguments: []ast.Node{&ast.IntegerNode{Value: re}},
				})
				return
			}
			ast.Patch(node, &ast.BinaryNode{
				Operator: "==",
				Left: &ast.CallNode{
					Callee:    &ast.IdentifierNode{Value: "__matchOn"},
					Arguments: []ast.Node{n.Arguments[0], &ast.IntegerNode{Value: re}},
				},
				Right: &ast.IntegerNode{Value: 1},
			})
		}
	}
}

// constStrings reads a constant argument: a string, an array of strings, or the
// name of a list.
func (p *patcher) constStrings(a ast.Node) ([]string, bool) {
	switch x := a.(type) {
	case *ast.StringNode:
		return []string{x.Value}, true
	case *ast.IdentifierNode:
		l, ok := p.cc.lists[x.Value]
		return l, ok
	case *ast.ArrayNode:
		var out []string
		for _, e := range x.Nodes {
			s, ok := p.constStrings(e)
			if !ok {
				return nil, false
			}
			out = append(out, s...)
		}
		return out, true
	}
	return nil, false
}

func (p *patcher) listNames() string {
	names := make([]string, 0, len(p.cc.lists))
	for n := range p.cc.lists {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// ---- the rule file ----

// rule is one compiled rule.
type rule struct {
	name       string
	class      engine.Class
	window     string      // a literal window, or ""
	windowExpr *vm.Program // or an expression that names it
	when       *vm.Program
	retry      *vm.Program // nil: no hint
	line       int
	whenSrc    string
	retrySrc   string
}

// goldenCase is one golden case of a rule file or of the config, with where
// it is written.
type goldenCase struct {
	failurejson.Case
	file  string // where the case is written, when not the rule file
	where string // "cases[2]" or "config cases[0]"
	line  int
}

var (
	topKeys  = []string{"name", "description", "lists", "rules", "cases"}
	ruleKeys = []string{"name", "description", "when", "class", "retryAfterMs", "window"}
)

// Load reads a rule file, compiles it, and runs its golden cases and those of
// opts.Cases. Errors name the file, the rule, the field and the line and column.
func Load(path string, opts Options) (*RuleSet, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return Parse(path, src, opts)
}

// Parse compiles a rule file held in memory (fileName is used in errors and, when
// neither opts nor the file name the set, for the set's name), then runs its
// golden cases and those of opts.Cases.
func Parse(fileName string, src []byte, opts Options) (*RuleSet, error) {
	rs, err := compileSet(fileName, src)
	if err != nil {
		return nil, err
	}
	rs = rs.with(opts)
	if err := rs.runCases(opts); err != nil {
		return nil, err
	}
	return rs, nil
}

func compileSet(fileName string, src []byte) (*RuleSet, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, &Error{File: fileName, Msg: err.Error()}
	}
	rs := &RuleSet{file: fileName, source: src, evidence: DefaultEvidence}
	rs.name = strings.TrimSuffix(filepath.Base(fileName), filepath.Ext(fileName))
	cc := &compileCtx{groupKeys: map[string]int{}, regexKeys: map[string]int{}, lists: map[string][]string{}}
	for k, v := range predefinedLists {
		cc.lists[k] = v
	}
	lines := strings.Split(string(src), "\n")
	var errs []error
	fail := func(n *yaml.Node, rule, field, format string, args ...any) {
		e := &Error{File: fileName, Rule: rule, Field: field, Msg: fmt.Sprintf(format, args...)}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		errs = append(errs, e)
	}

	if len(doc.Content) == 0 {
		return nil, &Error{File: fileName, Msg: "empty rule file: want a list of rules, or a mapping with rules:"}
	}
	root := doc.Content[0]
	var rulesNode, casesNode *yaml.Node
	switch root.Kind {
	case yaml.SequenceNode:
		rulesNode = root
	case yaml.MappingNode:
		for i := 0; i+1 < len(root.Content); i += 2 {
			k, v := root.Content[i], root.Content[i+1]
			switch k.Value {
			case "name":
				if v.Kind != yaml.ScalarNode || v.Value == "" || strings.ContainsAny(v.Value, "/ \t\n") {
					fail(v, "", "name", "must be a word without '/' or spaces (got %q)", v.Value)
					continue
				}
				rs.name = v.Value
			case "description":
			case "lists":
				if v.Kind != yaml.MappingNode {
					fail(v, "", "lists", "must be a mapping of name to a list of phrases")
					continue
				}
				for j := 0; j+1 < len(v.Content); j += 2 {
					ln, lv := v.Content[j], v.Content[j+1]
					var phrases []string
					if err := lv.Decode(&phrases); err != nil || len(phrases) == 0 {
						fail(lv, "", "lists."+ln.Value, "must be a non-empty list of strings")
						continue
					}
					if envHasName(ln.Value) {
						fail(ln, "", "lists."+ln.Value, "name %q is taken by the rule environment", ln.Value)
						continue
					}
					cc.lists[ln.Value] = phrases
				}
			case "rules":
				rulesNode = v
			case "cases":
				casesNode = v
			default:
				fail(k, "", "", "unknown key %q (valid: %s)", k.Value, strings.Join(topKeys, ", "))
			}
		}
	default:
		return nil, &Error{File: fileName, Line: root.Line, Column: root.Column, Msg: "want a list of rules, or a mapping with rules:"}
	}
	if rulesNode == nil || rulesNode.Kind != yaml.SequenceNode || len(rulesNode.Content) == 0 {
		n := rulesNode
		if n == nil {
			n = root
		}
		fail(n, "", "rules", "must be a non-empty list of rules")
		return nil, errors.Join(errs...)
	}

	seen := map[string]int{}
	for i, rn := range rulesNode.Content {
		field := fmt.Sprintf("rules[%d]", i)
		if rn.Kind != yaml.MappingNode {
			fail(rn, "", field, "a rule is a mapping with name, when and class")
			continue
		}
		r := &rule{line: rn.Line}
		var whenNode, retryNode, windowNode, classNode *yaml.Node
		var unknown []*yaml.Node
		for j := 0; j+1 < len(rn.Content); j += 2 {
			k, v := rn.Content[j], rn.Content[j+1]
			switch k.Value {
			case "name":
				r.name = v.Value
			case "description":
			case "when":
				whenNode = v
			case "class":
				classNode = v
			case "retryAfterMs":
				retryNode = v
			case "window":
				windowNode = v
			default:
				unknown = append(unknown, k)
			}
		}
		for _, k := range unknown {
			fail(k, r.name, field, "unknown key %q (valid: %s)", k.Value, strings.Join(ruleKeys, ", "))
		}
		name := r.name
		if name == "" {
			fail(rn, "", field, "a rule needs a name")
			name = field
		} else if strings.ContainsAny(name, "/ \t\n") {
			fail(rn, name, "name", "must not contain '/' or spaces")
		} else if prev, dup := seen[name]; dup {
			fail(rn, name, "name", "duplicate rule name (first at line %d)", prev)
		}
		seen[name] = rn.Line
		if classNode == nil {
			fail(rn, name, "class", "missing (valid: %s)", classNames())
		} else if c, err := engine.ParseClass(classNode.Value); err != nil {
			fail(classNode, name, "class", "%v", err)
		} else {
			r.class = c
		}
		if whenNode == nil || strings.TrimSpace(whenNode.Value) == "" {
			fail(rn, name, "when", "missing: an expression that is true when the rule applies")
		} else {
			r.whenSrc = whenNode.Value
			prog, err := compileExpr(cc, r.whenSrc, expr.AsBool())
			if err != nil {
				errs = append(errs, exprError(fileName, lines, whenNode, name, "when", err))
			}
			r.when = prog
		}
		if retryNode != nil && retryNode.Tag != "!!null" {
			r.retrySrc = retryNode.Value
			prog, err := compileExpr(cc, r.retrySrc)
			if err == nil {
				err = checkNumeric(prog)
			}
			if err != nil {
				errs = append(errs, exprError(fileName, lines, retryNode, name, "retryAfterMs", err))
			}
			r.retry = prog
		}
		if windowNode != nil && windowNode.Value != "" {
			w := strings.ToLower(windowNode.Value)
			if contains(windowNames, w) {
				r.window = w
			} else if prog, err := compileExpr(cc, windowNode.Value, expr.AsKind(reflect.String)); err == nil {
				r.windowExpr = prog
			} else {
				var fe *file.Error
				if errors.As(err, &fe) {
					err = errors.New(fe.Message)
				}
				fail(windowNode, name, "window", "must be one of %s, or an expression that names one (%v)", strings.Join(windowNames, ", "), err)
			}
		}
		rs.rules = append(rs.rules, r)
	}

	// limitWindow() reads the predefined window lists.
	rs.windowGroup = map[string]int{}
	for _, w := range windowGroups {
		var ids []int32
		for _, l := range []string{w + "Words", w + "Abbr"} {
			for _, ph := range predefinedLists[l] {
				id, _ := cc.phrases.add(ph, strings.HasSuffix(l, "Abbr"))
				ids = append(ids, int32(id))
			}
		}
		rs.windowGroup[w] = cc.group(ids, false)
	}

	// The hint search starts where the automaton saw its anchors.
	for _, a := range hintAnchors {
		if _, err := cc.phrases.addAnchor(a, false, true); err != nil {
			panic(err) // hintAnchors are constants
		}
	}

	if casesNode != nil {
		if casesNode.Kind != yaml.SequenceNode {
			fail(casesNode, "", "cases", "must be a list of {input, expect}")
		} else {
			for i, cn := range casesNode.Content {
				c, err := caseFromNode(fileName, i, cn)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				rs.cases = append(rs.cases, c)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m, err := compileMatcher(&cc.phrases)
	if err != nil {
		return nil, &Error{File: fileName, Msg: err.Error()}
	}
	rs.matcher, rs.groups, rs.regexes, rs.needText = m, cc.groups, cc.regexes, cc.needText
	rs.pool = &sync.Pool{New: func() any { return newEvalState() }}
	return rs, nil
}

// compileExpr compiles one expression against Env with the patcher.
func compileExpr(cc *compileCtx, src string, opts ...expr.Option) (*vm.Program, error) {
	p := &patcher{cc: cc}
	all := append([]expr.Option{expr.Env(Env{}), expr.Patch(p)}, opts...)
	prog, err := expr.Compile(src, all...)
	if len(p.errs) > 0 {
		e := p.errs[0]
		line, col := runeLineCol(src, e.from)
		return nil, &file.Error{Line: line, Column: col, Message: e.msg}
	}
	return prog, err
}

// checkNumeric rejects a retryAfterMs expression whose type cannot be a number.
func checkNumeric(p *vm.Program) error {
	t := p.Node().Type()
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Interface:
		return nil
	}
	return fmt.Errorf("must be a number of milliseconds (or nil), not %s", t)
}

// runeLineCol turns a rune offset into a 1-based line and a 0-based column.
func runeLineCol(src string, from int) (int, int) {
	line, col, n := 1, 0, 0
	for _, r := range src {
		if n == from {
			break
		}
		if r == '\n' {
			line, col = line+1, 0
		} else {
			col++
		}
		n++
	}
	return line, col
}

// exprError places an expression error in the YAML file.
func exprError(fileName string, lines []string, n *yaml.Node, rule, field string, err error) error {
	e := &Error{File: fileName, Line: n.Line, Column: n.Column, Rule: rule, Field: field, Msg: err.Error()}
	var fe *file.Error
	if errors.As(err, &fe) {
		e.Msg = fe.Message
		line, col := fe.Line, fe.Column
		if line < 1 {
			line = 1
		}
		switch n.Style {
		case yaml.LiteralStyle, yaml.FoldedStyle:
			e.Line = n.Line + line
			indent := 0 // the block's indentation: that of its first line
			if n.Line < len(lines) {
				l := lines[n.Line]
				indent = len(l) - len(strings.TrimLeft(l, " "))
			}
			e.Column = indent + col + 1
		case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
			e.Line = n.Line + line - 1
			if line == 1 {
				e.Column = n.Column + 1 + col
			} else {
				e.Column = col + 1
			}
		default:
			e.Line = n.Line + line - 1
			if line == 1 {
				e.Column = n.Column + col
			} else {
				e.Column = col + 1
			}
		}
	}
	return e
}

// caseFromNode reads one golden case of a rule file.
func caseFromNode(fileName string, i int, n *yaml.Node) (goldenCase, error) {
	where := fmt.Sprintf("cases[%d]", i)
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return goldenCase{}, &Error{File: fileName, Line: n.Line, Column: n.Column, Field: where, Msg: err.Error()}
	}
	c, err := caseFromMap(where, m)
	if err != nil {
		return goldenCase{}, &Error{File: fileName, Line: n.Line, Column: n.Column, Field: where, Msg: err.Error()}
	}
	c.line = n.Line
	return c, nil
}

// caseFromMap reads a golden case as decoded from YAML (the form
// failurejson.Case describes).
func caseFromMap(where string, m any) (goldenCase, error) {
	c, err := failurejson.ParseCase(m)
	return goldenCase{Case: c, where: where}, err
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func classNames() string {
	names := make([]string, len(engine.Classes))
	for i, c := range engine.Classes {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// envHasName reports whether name is a field or function of Env (or a helper the
// compiler rewrites).
func envHasName(name string) bool {
	switch name {
	case "has", "words", "hasAll", "match":
		return true
	}
	t := reflect.TypeOf(Env{})
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("expr") == name {
			return true
		}
	}
	return false
}
