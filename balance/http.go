package balance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/sameorigin"
	"github.com/hashicorp/go-hclog"
)

func init() {
	Register("http", func(s Spec) (engine.BalanceSource, error) { return NewHTTP(s) })
}

// HTTP is the "http" kind: it GETs a URL and maps the JSON response to a reading
// with expr expressions. An HTTP source is immutable and safe for concurrent use.
//
//	http:
//	  url: https://api.deepseek.com/user/balance
//	  headers: {Authorization: "Bearer ${DEEPSEEK_API_KEY}"}
//	  remaining: body.balance_infos[0].total_balance
//
// # Headers
//
// A header value may reference the key as ${NAME}, NAME being the entry's
// apiKeyEnv; it is looked up on each read (a key that is not set fails the read with
// ErrNoKey, without a request). No other reference is expanded, and any other
// ${…} is a construction error; the URL takes no references, so the key never
// appears in a URL (nor, therefore, in an error). Accept defaults to
// application/json.
//
// # Expressions
//
// Remaining, Windows and ResetsAt are compiled once, at construction (a bad one is
// a *FieldError naming "http.remaining" and so on), against an environment of
// `body` (the decoded JSON response), `status` (int) and `headers` (lower-cased
// names, first value each). Remaining may yield a number, a numeric string ("110.00")
// or nil (no remaining); Windows a list of maps {name, remaining, capacity} (entries
// malformed as ParseReading defines, but with numeric strings allowed, are dropped)
// or nil; ResetsAt a string or nil. In expr a map literal that is the body of a
// predicate needs parentheses: `map(body.plans, ({name: .name, remaining: .left}))`.
// Expressions always terminate, and run under expr's default memory budget.
//
// # Failures
//
// A non-2xx status (ErrStatus), no answer (ErrTransport), the timeout (ErrTimeout), a
// body that is not JSON or exceeds MaxOutput (ErrOutput) or an expression that
// fails or yields the wrong type (ErrMapping) is a missing reading. Errors name the
// URL without its query, the status and the failing field, never the body; an
// expression's own message is kept only when its shape carries no value
// ("index out of range: 0 (array length is 0)", "cannot fetch x from <nil>").
type HTTP struct {
	url       string
	headers   Headers
	timeout   time.Duration
	lookupEnv func(string) (string, bool)
	client    *http.Client
	logger    hclog.Logger

	remaining, windows, resetsAt *vm.Program // nil when unset
}

// Headers is a validated set of request headers whose values may reference the
// key as ${NAME}, NAME being the apiKeyEnv variable; Build expands it. The zero
// value is an empty set. The http kind uses it, and the wasm kind can, so both
// treat keys alike.
type Headers struct {
	apiKeyEnv string
	list      []headerTemplate // sorted by name
}

// headerTemplate is one configured header; usesKey says whether its value holds
// ${apiKeyEnv}.
type headerTemplate struct {
	name, value string
	usesKey     bool
}

// exprEnv is what the expressions see.
type exprEnv struct {
	Body    any               `expr:"body"`
	Status  int               `expr:"status"`
	Headers map[string]string `expr:"headers"`
}

var refPattern = regexp.MustCompile(`\$\{([^}]*)\}`)

// NewHTTP builds an http source from s.HTTP, s.APIKeyEnv, s.Timeout and s.HTTPClient.
// It parses the URL, checks the header references and compiles the expressions.
func NewHTTP(s Spec) (*HTTP, error) {
	h := s.HTTP
	if h == nil {
		return nil, fieldErr("http", "missing")
	}
	if err := checkEnvName("apiKeyEnv", s.APIKeyEnv, true); err != nil {
		return nil, err
	}
	u, err := url.Parse(h.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fieldErr("http.url", "want an absolute http or https URL (got %q)", redactURL(h.URL))
	}
	if strings.Contains(h.URL, "${") {
		return nil, fieldErr("http.url", "takes no ${…} references; put the key in a header")
	}
	src := &HTTP{
		url:       h.URL,
		timeout:   s.timeout(),
		lookupEnv: s.lookupEnv,
		client:    s.HTTPClient,
		logger:    s.logger(),
	}
	if src.client == nil {
		src.client = defaultClient
	}
	if src.headers, err = NewHeaders("http.headers", h.Headers, s.APIKeyEnv); err != nil {
		return nil, err
	}
	if h.Remaining == "" && h.Windows == "" {
		return nil, fieldErr("http.remaining", "set remaining, windows or both")
	}
	for _, e := range []struct {
		field, src string
		prog       **vm.Program
	}{
		{"http.remaining", h.Remaining, &src.remaining},
		{"http.windows", h.Windows, &src.windows},
		{"http.resetsAt", h.ResetsAt, &src.resetsAt},
	} {
		if strings.TrimSpace(e.src) == "" {
			continue
		}
		p, err := expr.Compile(e.src, expr.Env(exprEnv{}))
		if err != nil {
			return nil, &FieldError{Field: e.field, Err: fmt.Errorf("compile %q: %w", e.src, err)}
		}
		*e.prog = p
	}
	return src, nil
}

// NewHeaders validates headers: names must be valid, values free of line breaks,
// and the only reference a value may hold is ${apiKeyEnv}. field names the headers
// in errors ("http.headers" gives "http.headers[Authorization]: …").
func NewHeaders(field string, headers map[string]string, apiKeyEnv string) (Headers, error) {
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	hs := Headers{apiKeyEnv: apiKeyEnv, list: make([]headerTemplate, 0, len(names))}
	for _, n := range names {
		f := fmt.Sprintf("%s[%s]", field, n)
		if n == "" || strings.ContainsAny(n, " \t\r\n:") {
			return Headers{}, fieldErr(f, "invalid header name")
		}
		v := headers[n]
		if strings.ContainsAny(v, "\r\n\x00") {
			return Headers{}, fieldErr(f, "value contains a control character")
		}
		t := headerTemplate{name: n, value: v}
		for _, m := range refPattern.FindAllStringSubmatch(v, -1) {
			switch {
			case apiKeyEnv == "":
				return Headers{}, fieldErr(f, "references ${%s}, but the entry has no apiKeyEnv", m[1])
			case m[1] != apiKeyEnv:
				return Headers{}, fieldErr(f, "references ${%s}; only the apiKeyEnv variable, ${%s}, is expanded", m[1], apiKeyEnv)
			}
			t.usesKey = true
		}
		hs.list = append(hs.list, t)
	}
	return hs, nil
}

// Build returns the headers with the key expanded, looked up now through
// lookupEnv (nil: os.LookupEnv), over a default "Accept: application/json". A
// header that needs the key when it is not set fails with ErrNoKey, which names the
// variable only.
func (hs Headers) Build(lookupEnv func(string) (string, bool)) (http.Header, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	header := http.Header{}
	header.Set("Accept", "application/json")
	for _, t := range hs.list {
		v := t.value
		if t.usesKey {
			key, ok := lookupEnv(hs.apiKeyEnv)
			if !ok || key == "" {
				return nil, fmt.Errorf("%w: %s is not set; the request needs it", ErrNoKey, hs.apiKeyEnv)
			}
			v = strings.ReplaceAll(v, "${"+hs.apiKeyEnv+"}", key)
		}
		header.Set(t.name, v)
	}
	return header, nil
}

// Read fetches the URL and maps the response. See HTTP for the contract.
func (h *HTTP) Read(parent context.Context) (engine.Reading, error) {
	ctx, cancel := context.WithTimeout(parent, h.timeout)
	defer cancel()

	header, err := h.headers.Build(h.lookupEnv)
	if err != nil {
		return engine.Reading{}, err
	}
	resp, err := Fetch(ctx, h.client, h.url, header)
	if err != nil {
		if perr := parent.Err(); perr != nil && errors.Is(err, ErrTimeout) {
			// The caller's deadline, not the source's timeout.
			return engine.Reading{}, fmt.Errorf("GET %s cancelled by its caller: %w", redactURL(h.url), perr)
		}
		return engine.Reading{}, err
	}
	if resp.Status < 200 || resp.Status > 299 {
		return engine.Reading{}, fmt.Errorf("%w: GET %s answered %d", ErrStatus, redactURL(h.url), resp.Status)
	}
	var body any
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		return engine.Reading{}, fmt.Errorf("%w: GET %s: the body is not JSON (%d bytes)", ErrOutput, redactURL(h.url), len(resp.Body))
	}
	env := exprEnv{Body: body, Status: resp.Status, Headers: map[string]string{}}
	for k, vs := range resp.Header {
		if len(vs) > 0 {
			env.Headers[strings.ToLower(k)] = vs[0]
		}
	}
	return h.mapReading(env)
}

// mapReading evaluates the expressions over one response.
func (h *HTTP) mapReading(env exprEnv) (engine.Reading, error) {
	var r engine.Reading
	if h.remaining != nil {
		v, err := expr.Run(h.remaining, env)
		if err != nil {
			return engine.Reading{}, mappingErr("http.remaining", err)
		}
		if v != nil {
			f, ok := number(v, true)
			if !ok {
				if jsonKind(v) == "number" { // ±Inf or NaN: a division by zero, say
					return engine.Reading{}, fmt.Errorf("%w: http.remaining yielded a number that is not finite, want a finite number", ErrMapping)
				}
				return engine.Reading{}, fmt.Errorf("%w: http.remaining yielded %s, want a number", ErrMapping, jsonKindArticle(v))
			}
			r.Remaining = &f
		}
	}
	if h.windows != nil {
		v, err := expr.Run(h.windows, env)
		if err != nil {
			return engine.Reading{}, mappingErr("http.windows", err)
		}
		var dropped int
		r.Windows, dropped = windows(v, true)
		if dropped > 0 {
			h.logger.Debug("malformed windows dropped", "dropped", dropped, "kept", len(r.Windows))
		}
	}
	if h.resetsAt != nil {
		v, err := expr.Run(h.resetsAt, env)
		if err != nil {
			return engine.Reading{}, mappingErr("http.resetsAt", err)
		}
		switch s := v.(type) {
		case nil:
		case string:
			r.ResetsAt = s
		default:
			h.logger.Debug("resetsAt dropped: not a string", "type", jsonKind(v))
		}
	}
	return r, nil
}

// safeMessages are the shapes of expr runtime messages that carry only types,
// indexes and names from the expression: everything else may quote a value of the
// response ("invalid operation: float(abc)") and is replaced by a generic word.
var safeMessages = []*regexp.Regexp{
	regexp.MustCompile(`^index out of range: -?\d+ \(array length is \d+\)$`),
	regexp.MustCompile(`^cannot fetch [\w-]+ from [\w.*<>\[\]{} ]+$`),
	regexp.MustCompile(`^invalid operation: [\w.*<>\[\]{}]+ \S{1,3} [\w.*<>\[\]{}]+$`),
}

// mappingErr reports a failed expression without quoting the response: the
// message is kept only when it has a known value-free shape; the position is kept.
func mappingErr(field string, err error) error {
	msg := "evaluation failed"
	var fe *file.Error
	if errors.As(err, &fe) {
		for _, re := range safeMessages {
			if re.MatchString(fe.Message) {
				msg = fe.Message
				break
			}
		}
		if fe.Line > 0 {
			msg = fmt.Sprintf("%s (%d:%d)", msg, fe.Line, fe.Column)
		}
	}
	return fmt.Errorf("%w: %s: %s", ErrMapping, field, msg)
}

// Response is one HTTP answer as Fetch returns it.
type Response struct {
	Status int
	Header http.Header
	Body   []byte // at most MaxOutput bytes
}

// defaultClient follows a redirect only within the URL's own origin: the
// request's headers hold the key (sameorigin.CheckRedirect says why).
var defaultClient = &http.Client{CheckRedirect: sameorigin.CheckRedirect}

// Fetch GETs rawURL with header through client (nil: a default client), bounded by
// ctx, and returns the answer whatever its status. The body is read up to MaxOutput
// bytes; a longer one is an ErrOutput. Errors wrap ErrTimeout or ErrTransport and
// name the URL without its query or user info, never a header or the body. The wasm
// balance kind uses it for the request its module maps.
func Fetch(ctx context.Context, client *http.Client, rawURL string, header http.Header) (*Response, error) {
	if client == nil {
		client = defaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: bad request", ErrTransport, redactURL(rawURL))
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, transportErr(ctx, rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxOutput+1))
	if err != nil {
		return nil, transportErr(ctx, rawURL, err)
	}
	if len(body) > MaxOutput {
		return nil, fmt.Errorf("%w: GET %s: body has more than %d bytes", ErrOutput, redactURL(rawURL), MaxOutput)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// transportErr turns a client error into ErrTimeout or ErrTransport, replacing the
// *url.Error's URL (which may hold a query) by the redacted one.
func transportErr(ctx context.Context, rawURL string, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: GET %s got no answer in time", ErrTimeout, redactURL(rawURL))
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("GET %s cancelled: %w", redactURL(rawURL), cerr)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%w: GET %s: %w", ErrTransport, redactURL(rawURL), err)
}

// redactURL drops a URL's user info, query and fragment, which may carry secrets.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.IndexAny(raw, "?#"); i >= 0 {
			raw = raw[:i]
		}
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			raw = raw[i+1:]
		}
		return raw
	}
	u.User, u.RawQuery, u.Fragment, u.RawFragment = nil, "", "", ""
	u.ForceQuery = false
	return u.String()
}

var _ engine.BalanceSource = (*HTTP)(nil)
