package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The decision API (/gate/v1/) is for harnesses that make their own calls and ask
// gatectl for each decision: admit (and settle) a call, classify and plan a
// failure, report a success, read the gate's status and the pools, draw a route,
// read and change a session's settings, and follow the event stream. Every answer
// is JSON; every error is {"error":{"message","field","type"}} (writeError), the
// field naming the request field at fault. Request bodies are decoded strictly:
// an unknown field is a 400 that names it. docs/openapi.yaml describes it all.

// apiPrefix is where the decision API lives.
const apiPrefix = "/gate/v1/"

// apiMaxBody bounds a request body (a failure's upstream body included).
const apiMaxBody = 1 << 20

// api is the decision API's state: the server, and the tickets it handed out.
// Safe for concurrent use.
type api struct {
	s       *Server
	tickets *apiTickets
}

// apiRoute is one endpoint: a path pattern and its handler per method.
type apiRoute struct {
	pattern string
	methods map[string]http.HandlerFunc
}

// registerAPI mounts the decision API under /gate/v1/.
func (s *Server) registerAPI(mux *http.ServeMux) {
	s.api = newAPI(s)
	s.api.mount(mux)
}

func newAPI(s *Server) *api {
	return &api{s: s, tickets: newAPITickets(apiTicketTTL, apiMaxTickets)}
}

// mount registers the endpoints on mux.
func (a *api) mount(mux *http.ServeMux) {
	routes := []apiRoute{
		{"admit", map[string]http.HandlerFunc{http.MethodPost: a.handleAdmit}},
		{"settle", map[string]http.HandlerFunc{http.MethodPost: a.handleSettle}},
		{"sent", map[string]http.HandlerFunc{http.MethodPost: a.handleSent}},
		{"failure", map[string]http.HandlerFunc{http.MethodPost: a.handleFailure}},
		{"success", map[string]http.HandlerFunc{http.MethodPost: a.handleSuccess}},
		{"status", map[string]http.HandlerFunc{http.MethodGet: a.handleStatus}},
		{"routes", map[string]http.HandlerFunc{http.MethodGet: a.handleRoutes}},
		{"pools/{pool}/pick", map[string]http.HandlerFunc{http.MethodGet: a.handlePick}},
		{"sessions", map[string]http.HandlerFunc{http.MethodGet: a.handleSessionsList}},
		{"sessions/{id}", map[string]http.HandlerFunc{http.MethodGet: a.handleSessionGet, http.MethodPut: a.handleSessionPut}},
		{"events", map[string]http.HandlerFunc{http.MethodGet: a.handleEvents}},
		{"models/{provider}/{model...}", map[string]http.HandlerFunc{http.MethodPost: a.handleModel}}, // {model}/reset; see handleModel
		{"providers/{provider}/unmark", map[string]http.HandlerFunc{http.MethodPost: a.handleUnmark}},
		{"failures/unclassified", map[string]http.HandlerFunc{http.MethodGet: a.handleUnclassified}},
		{"waits", map[string]http.HandlerFunc{http.MethodGet: a.handleWaits}},
		{"settings", map[string]http.HandlerFunc{http.MethodGet: a.handleSettingsAll}},
		{"settings/{section}", map[string]http.HandlerFunc{http.MethodGet: a.handleSettingsGet, http.MethodPut: a.handleSettingsPut}},
		{"settings/{section}/reset", map[string]http.HandlerFunc{http.MethodPost: a.handleSettingsReset}},
		{"stats", map[string]http.HandlerFunc{http.MethodGet: a.handleStats}},
		{"report", map[string]http.HandlerFunc{http.MethodGet: a.handleReport}},
	}
	var paths []string
	for _, rt := range routes {
		mux.Handle(apiPrefix+rt.pattern, apiMethods(rt.methods))
		paths = append(paths, apiPrefix+rt.pattern)
	}
	mux.HandleFunc(apiPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no endpoint %s (endpoints: %s)", r.URL.Path, strings.Join(paths, ", ")))
	})
}

// apiMethods dispatches on the method, answering a JSON 405 (with Allow) for the
// others. GET serves HEAD too.
func apiMethods(m map[string]http.HandlerFunc) http.Handler {
	allowed := make([]string, 0, len(m))
	for k := range m {
		allowed = append(allowed, k)
	}
	sort.Strings(allowed)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		if h := m[method]; h != nil {
			h(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
	})
}

// apiDecode reads the body strictly into v (a pointer to a struct): one JSON
// object, no unknown fields, nothing after it. On failure it answers the error
// (naming the field) and returns false.
func apiDecode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, apiMaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body exceeds %d bytes", apiMaxBody))
			return false
		}
		writeError(w, http.StatusBadRequest, "", "reading the request body: "+err.Error())
		return false
	}
	if !utf8.Valid(body) {
		// encoding/json would turn the bad bytes into U+FFFD, and two different
		// names into one session or model: JSON between systems is UTF-8.
		at := 0
		for rest := body; len(rest) > 0; {
			r, n := utf8.DecodeRune(rest)
			if r == utf8.RuneError && n == 1 {
				break
			}
			at, rest = at+n, rest[n:]
		}
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf("the request body is not valid UTF-8 (at byte %d): JSON is UTF-8", at))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field, msg := apiDecodeError(err, body, reflect.TypeOf(v))
		writeError(w, http.StatusBadRequest, field, msg)
		return false
	}
	if err := dec.Decode(&json.RawMessage{}); err != io.EOF {
		writeError(w, http.StatusBadRequest, "", "unexpected data after the JSON object")
		return false
	}
	return true
}

// apiDecodeError turns a decoding error into the field at fault and a message.
func apiDecodeError(err error, body []byte, t reflect.Type) (field, msg string) {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "", "the request body is empty: expected a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "", "malformed JSON: the body ends too early"
	case errors.As(err, &syn):
		return "", fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "", fmt.Sprintf("expected a JSON object (got %s)", typ.Value)
		}
		field := typ.Field
		var raw any
		if json.Unmarshal(body, &raw) == nil {
			field = apiMapValueField(raw, t, field) // encoding/json leaves a map's key out of the path
		}
		return field, fmt.Sprintf("%s must be %s (got %s)", field, apiTypeName(typ.Type), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strings.CutPrefix(err.Error(), "json: unknown field ")
		name = strings.Trim(name, `"`)
		var raw any
		if json.Unmarshal(body, &raw) == nil {
			if path, known := apiUnknownField(raw, t, ""); path != "" {
				return path, fmt.Sprintf("unknown field %q (fields: %s)", path, strings.Join(known, ", "))
			}
		}
		return name, fmt.Sprintf("unknown field %q", name)
	}
	return "", "invalid request: " + err.Error()
}

// apiTypeName says what JSON a Go type wants, for people.
func apiTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

// apiUnknownField walks a decoded body beside the struct type it was meant for
// and returns the dotted path of the first unknown field (in sorted order), and
// the fields its object accepts.
func apiUnknownField(raw any, t reflect.Type, prefix string) (string, []string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	obj, ok := raw.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return "", nil
	}
	fields := map[string]reflect.Type{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[strings.ToLower(name)] = f.Type
		names = append(names, name)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ft, ok := fields[strings.ToLower(k)] // encoding/json matches names case-insensitively
		if !ok {
			return prefix + k, names
		}
		if path, known := apiUnknownField(obj[k], ft, prefix+k+"."); path != "" {
			return path, known
		}
	}
	return "", nil
}

// apiMapValueField completes field, the dotted path encoding/json gives a type
// error at, when it names a map (such as headers): with the key of the first
// value, in key order, that is not of the map's value type ("headers.retry-after").
// Anything else comes back as it was.
func apiMapValueField(raw any, t reflect.Type, field string) string {
	for _, name := range strings.Split(field, ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		obj, ok := raw.(map[string]any)
		if !ok || t.Kind() != reflect.Struct {
			return field
		}
		ft, found := reflect.Type(nil), false
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "" {
				tag = f.Name
			}
			if f.IsExported() && strings.EqualFold(tag, name) {
				ft, found = f.Type, true
				break
			}
		}
		if !found {
			return field
		}
		var v any
		for k, x := range obj { // encoding/json matches names case-insensitively
			if strings.EqualFold(k, name) {
				v = x
			}
		}
		raw, t = v, ft
	}
	obj, ok := raw.(map[string]any)
	if !ok || t.Kind() != reflect.Map {
		return field
	}
	keys := slices.Sorted(maps.Keys(obj))
	for _, k := range keys {
		var probe = reflect.New(t.Elem())
		b, _ := json.Marshal(obj[k])
		if json.Unmarshal(b, probe.Interface()) != nil {
			return field + "." + k
		}
	}
	return field
}

// apiCheckName validates an identifier from a request (provider, model, session,
// pool, turn): not too long, no control characters. The empty string passes; the
// caller decides whether the field is required.
func apiCheckName(field, v string) error {
	switch {
	case len(v) > 256:
		return apiFieldError{field, fmt.Sprintf("%s is too long (%d bytes; at most 256)", field, len(v))}
	case !utf8.ValidString(v):
		return apiFieldError{field, field + " is not valid UTF-8"}
	case strings.ContainsFunc(v, unicode.IsControl):
		return apiFieldError{field, field + " must not contain control characters"}
	}
	return nil
}

// checkProvider refuses a provider the config does not name: each name would
// otherwise start a bucket, retry budgets and metric series of its own.
func (a *api) checkProvider(field, provider string) error {
	providers := a.s.snap.Current().Config.Providers
	if _, ok := providers[provider]; ok {
		return nil
	}
	names := make([]string, 0, len(providers))
	for p := range providers {
		names = append(names, p)
	}
	sort.Strings(names)
	return apiFieldError{field, fmt.Sprintf("provider %q is not configured (providers: %s)", provider, apiNames(names))}
}

// apiFieldError is a request error about one field: a 400 naming it.
type apiFieldError struct{ field, msg string }

func (e apiFieldError) Error() string { return e.msg }

// apiFail answers err: a 400 naming the field for an apiFieldError, else status.
func apiFail(w http.ResponseWriter, status int, err error) {
	var fe apiFieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, fe.field, fe.msg)
		return
	}
	writeError(w, status, "", err.Error())
}

// apiFirstErr returns the first non-nil error.
func apiFirstErr(errs ...error) error {
	i := slices.IndexFunc(errs, func(e error) bool { return e != nil })
	if i < 0 {
		return nil
	}
	return errs[i]
}

// apiMs renders a duration in whole milliseconds, rounding up: a wait of 0.4 ms
// is not "0 ms".
func apiMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
