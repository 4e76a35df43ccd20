package rules

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr/vm"

	"github.com/gatectl/gatectl/engine"
)

// Env is the typed environment every rule expression is compiled against. The
// names in backquotes are the names rules use. Its func fields are bound to the
// failure being classified; they read the body at most once per failure (the body
// is scanned once for every phrase of the set, parsed as JSON at most once, its
// hint extracted at most once).
//
// Fields:
//
//	status          int     HTTP status; 0 for a transport error
//	provider, model string
//	errorKind       string  "timeout", "reset", "refused", "dns", or ""
//	body            string  the body as received
//	text            string  the body lowercased, whitespace runs collapsed to one space
//	headers         map[string]string as received (use header() to look up)
//	sinceCapacityMs int     ms since this provider's last capacity failure; -1 when none
//	evidenceMs      int     the MISLABELED evidence window (10 min unless configured)
//	capacityRecent  bool    0 <= sinceCapacityMs <= evidenceMs
//
// Functions (the phrase and regex arguments must be constants: they are compiled
// when the rule set loads):
//
//	has(p...)       any phrase occurs in the body, case-, whitespace-, '_'- and
//	                '-'-insensitively ("rate limit" matches "Rate_Limit" and a
//	                line broken mid-word); arguments are strings, lists of strings,
//	                or names of the file's lists
//	words(p...)     like has, but each phrase must start and end on a word boundary
//	hasAll(p...)    every phrase occurs
//	match(re)       the regexp matches text (case-insensitive)
//	match(s, re)    the regexp matches s
//	header(name)    a response header, case-insensitively; "" when absent
//	code()          the effective status: status, or for a 200 or a transport
//	                failure the status the body reports ("Error code: 429",
//	                "status code 503", "code": 429); 0 when none
//	hint()          the wait hint in ms (headers, body fields, prose); -1 when none
//	hintIn(s)       the prose hint in s, in ms; -1 when none
//	dur(s)          a duration ("26s", "6m0s", "30 秒", "1.5") in ms; -1 when none
//	jstr(path)      the body's JSON value at path as a string ("" when absent);
//	                paths are "error.code", "error.details[0].reason", "..reason"
//	                (anywhere), with "*" for any key or element
//	jnum(path)      the value at path as a number (NaN when absent or not a number)
//	json(path)      the value at path (nil when absent)
//	limitWindow()   the limit's window named in the body: "month", "week", "day",
//	                "hour", "minute", or ""
//	requestOverLimit()
//	                the body reports a limit and a request larger than it, as
//	                OpenAI and Groq word them ("Limit 7000, Used 0, Requested
//	                12903", "limit: 7,000, used: 0, requested: 12,903", "Limit
//	                30000, Requested 50034"); false when it reports no such pair
//	                or the request fits ("Limit 240000, Used 0, Requested 1049")
type Env struct {
	Status          int               `expr:"status"`
	Provider        string            `expr:"provider"`
	Model           string            `expr:"model"`
	ErrorKind       string            `expr:"errorKind"`
	Body            string            `expr:"body"`
	Text            string            `expr:"text"`
	Headers         map[string]string `expr:"headers"`
	SinceCapacityMs int               `expr:"sinceCapacityMs"`
	EvidenceMs      int               `expr:"evidenceMs"`
	CapacityRecent  bool              `expr:"capacityRecent"`

	Header      func(name string) string  `expr:"header"`
	Code        func() int                `expr:"code"`
	Hint        func() int                `expr:"hint"`
	HintIn      func(s string) int        `expr:"hintIn"`
	Dur         func(s string) int        `expr:"dur"`
	JStr        func(path string) string  `expr:"jstr"`
	JNum        func(path string) float64 `expr:"jnum"`
	JSON        func(path string) any     `expr:"json"`
	LimitWindow func() string             `expr:"limitWindow"`
	OverLimit   func() bool               `expr:"requestOverLimit"`

	// Targets of the calls the compiler rewrites; not for rules to call.
	XHas     func(group int) bool       `expr:"__has"`
	XMatch   func(re int) bool          `expr:"__match"`
	XMatchOn func(s string, re int) int `expr:"__matchOn"`
}

// evalState is the per-call state of a rule set: the Env handed to the programs,
// its lazily computed views of the failure, and a VM. States are pooled; one serves
// one Classify at a time.
type evalState struct {
	env Env
	vm  vm.VM
	rs  *RuleSet
	f   *engine.Failure
	now time.Time

	buf      scanBuffers
	candBuf  []cand
	scanned  bool
	lowerStr string
	lowerOK  bool
	text     string
	textOK   bool
	root     any
	rootOK   bool
	hint     int
	hintOK   bool
	code     int
	codeOK   bool
	over     bool
	overOK   bool
}

func newEvalState() *evalState {
	st := &evalState{}
	st.env.Header = st.header
	st.env.Code = st.effectiveCode
	st.env.Hint = st.hintMs
	st.env.HintIn = hintIn
	st.env.Dur = durMs
	st.env.JStr = st.jstr
	st.env.JNum = st.jnum
	st.env.JSON = st.json
	st.env.LimitWindow = st.limitWindow
	st.env.OverLimit = st.requestOverLimit
	st.env.XHas = st.has
	st.env.XMatch = st.match
	st.env.XMatchOn = st.matchOn
	return st
}

// reset points the state at a new failure.
func (st *evalState) reset(rs *RuleSet, f *engine.Failure, now time.Time) {
	st.rs, st.f, st.now = rs, f, now
	st.scanned, st.lowerOK, st.textOK, st.rootOK, st.hintOK, st.codeOK, st.overOK = false, false, false, false, false, false, false
	st.lowerStr, st.text, st.root = "", "", nil
	e := &st.env
	e.Status, e.Provider, e.Model, e.ErrorKind, e.Body, e.Headers = f.Status, f.Provider, f.Model, f.ErrorKind, f.Body, f.Headers
	e.EvidenceMs = int(rs.evidence / time.Millisecond)
	e.SinceCapacityMs, e.CapacityRecent = -1, false
	if f.SinceCapacityMs != nil && *f.SinceCapacityMs >= 0 {
		e.SinceCapacityMs = int(*f.SinceCapacityMs)
		e.CapacityRecent = *f.SinceCapacityMs <= int64(e.EvidenceMs)
	}
	e.Text = ""
	if rs.needText {
		e.Text = st.collapsed()
	}
}

// release drops references to the failure before the state goes back to the pool.
func (st *evalState) release() {
	st.f, st.rs = nil, nil
	st.lowerStr, st.text, st.root = "", "", nil
	e := &st.env
	e.Body, e.Text, e.Headers, e.Provider, e.Model = "", "", nil, "", ""
}

func (st *evalState) scan() {
	if !st.scanned {
		st.rs.matcher.scan(st.f.Body, &st.buf)
		st.scanned = true
	}
}

// lower is the body with ASCII letters lowercased.
func (st *evalState) lower() string {
	if !st.lowerOK {
		st.lowerStr = lowerString(st.f.Body)
		st.lowerOK = true
	}
	return st.lowerStr
}

// collapsed is the body lowercased with whitespace runs collapsed to one space.
func (st *evalState) collapsed() string {
	if !st.textOK {
		st.text = collapse(st.f.Body)
		st.textOK = true
	}
	return st.text
}

// collapse lowercases ASCII letters and collapses runs of ASCII whitespace to one
// space (trimmed at both ends).
func collapse(s string) string {
	b := make([]byte, 0, len(s))
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			space = true
			continue
		}
		if space && len(b) > 0 {
			b = append(b, ' ')
		}
		space = false
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

func (st *evalState) header(name string) string { return st.f.Header(name) }

func (st *evalState) has(group int) bool {
	st.scan()
	g := st.rs.groups[group]
	if g.all {
		for _, id := range g.ids {
			if !st.buf.has(id) {
				return false
			}
		}
		return true
	}
	for _, id := range g.ids {
		if st.buf.has(id) {
			return true
		}
	}
	return false
}

func (st *evalState) match(re int) bool {
	return st.rs.regexes[re].MatchString(st.collapsed())
}

func (st *evalState) matchOn(s string, re int) int {
	if st.rs.regexes[re].MatchString(s) {
		return 1
	}
	return 0
}

func (st *evalState) hintMs() int {
	if !st.hintOK {
		st.hint = -1
		if ms, ok := parseHint(st.f, st.cands, st.now); ok {
			st.hint = int(ms)
		}
		st.hintOK = true
	}
	return st.hint
}

// cands lists where the scan saw hint anchors, in order.
func (st *evalState) cands() []cand {
	st.scan()
	out := st.candBuf[:0]
	for _, h := range st.buf.anchors {
		ph := st.rs.matcher.phrases[h.id]
		out = append(out, cand{anchor: ph.squashed, pos: rawStart(st.f.Body, h.end, len(ph.squashed))})
	}
	st.candBuf = out
	return out
}

func hintIn(s string) int {
	if ms, ok := hintFromProse(s, findCands(s)); ok {
		return int(ms)
	}
	return -1
}

func durMs(s string) int {
	if ms, ok := ParseDuration(s); ok {
		return int(ms)
	}
	return -1
}

func (st *evalState) parsed() any {
	if !st.rootOK {
		st.root = parseLoose(st.f.Body)
		st.rootOK = true
	}
	return st.root
}

func (st *evalState) json(path string) any {
	v, _ := lookup(st.parsed(), path)
	return v
}

func (st *evalState) jstr(path string) string {
	v, ok := lookup(st.parsed(), path)
	if !ok {
		return ""
	}
	return scalarString(v)
}

func (st *evalState) jnum(path string) float64 {
	v, ok := lookup(st.parsed(), path)
	if !ok {
		return math.NaN()
	}
	switch x := v.(type) {
	case float64:
		return x
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f
		}
	}
	return math.NaN()
}

// limitWindow names the longest window the body mentions.
func (st *evalState) limitWindow() string {
	for _, w := range windowGroups {
		if st.has(st.rs.windowGroup[w]) {
			return w
		}
	}
	return ""
}

// limitRequested is a limit and a request as OpenAI and Groq report them, on the
// lowered, collapsed text: "limit 7000, used 0, requested 12903", "limit: 7,000,
// used: 0, requested: 12,903", "limit 30000, requested 50034".
// Digit groups may be of any size ("1,00,000"): the commas are dropped.
var limitRequested = regexp.MustCompile(`limit:? ?([0-9](?:[0-9]|,[0-9])*)[,;]? (?:used:? ?[0-9][0-9,]*[,;]? )?requested:? ?([0-9](?:[0-9]|,[0-9])*)`)

// requestOverLimit reports whether the body names a request larger than its limit:
// such a request can never pass, while one that fits is only waiting for the
// window ("Limit 240000, Used 0, Requested 1049" from a counter that reads 0).
func (st *evalState) requestOverLimit() bool {
	if !st.overOK {
		st.over = false
		for _, m := range limitRequested.FindAllStringSubmatch(st.collapsed(), -1) {
			limit, lok := commaNumber(m[1])
			requested, rok := commaNumber(m[2])
			if lok && rok && requested > limit {
				st.over = true
				break
			}
		}
		st.overOK = true
	}
	return st.over
}

// commaNumber reads digits with optional grouping commas ("12,903", "1,00,000").
func commaNumber(s string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	return f, err == nil
}

// effectiveCode is the status, or the status the body reports when the HTTP status
// says nothing about the failure (0 or 2xx).
func (st *evalState) effectiveCode() int {
	if !st.codeOK {
		st.code = st.f.Status
		if st.code < 300 {
			if c := codeInBody(st.lower()); c != 0 {
				st.code = c
			}
		}
		st.codeOK = true
	}
	return st.code
}

// codeKeywords precede a status code in bodies that report one.
var codeKeywords = []string{"error code", "status code", "statuscode", "status_code", "httpstatuscode", "status", "code", "http/1.1", "http/2", "http", "api error", "error"}

// codeInBody finds a 4xx/5xx status the body reports: at its start ("429 Rate
// limit reached"), or within a few bytes after a keyword ("Error code: 429",
// `"code": 503`, "status code 503").
func codeInBody(lower string) int {
	if c, ok := statusAt(lower, skipSpaces(lower, 0)); ok {
		return c
	}
	for i := 0; i+3 <= len(lower); i++ {
		c, ok := statusAt(lower, i)
		if !ok {
			continue
		}
		before := lower[max(0, i-24):i]
		before = strings.TrimRight(before, " \t\r\n\"':=([{")
		for _, k := range codeKeywords {
			if strings.HasSuffix(before, k) {
				return c
			}
		}
		i += 2
	}
	return 0
}

// statusAt reads a 4xx/5xx status standing alone at lower[i].
func statusAt(lower string, i int) (int, bool) {
	if i+3 > len(lower) || i > 0 && isDigit(lower[i-1]) {
		return 0, false
	}
	a, b, c := lower[i], lower[i+1], lower[i+2]
	if a != '4' && a != '5' || !isDigit(b) || !isDigit(c) {
		return 0, false
	}
	if i+3 < len(lower) && (isDigit(lower[i+3]) || lower[i+3] == '.' && i+4 < len(lower) && isDigit(lower[i+4])) {
		return 0, false
	}
	return int(a-'0')*100 + int(b-'0')*10 + int(c-'0'), true
}
