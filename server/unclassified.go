package server

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/rules"
)

// Learning from the field: the server keeps the last failures whose verdict
// rests on nothing the provider said — a built-in rule that decides from the
// status code alone (builtin/status-429, builtin/status-5xx, ...) or no rule at
// all (UNKNOWN by chain/none) — so that an operator can read them at
// GET /gate/v1/failures/unclassified (`gatectl failures --unclassified`) and turn
// them into a rule file. They are recorded where both the proxy and
// POST /gate/v1/failure classify: the snapshot chain's verdict hook.

// UnclassifiedFailure is one failure that fell through to a catch-all rule,
// redacted: credential headers are blanked, keys and bearer tokens in the body
// are masked, and the body is cut to unclassifiedExcerpt bytes.
type UnclassifiedFailure struct {
	Time      time.Time         `json:"time"`
	Provider  string            `json:"provider"`
	Model     string            `json:"model,omitempty"`
	Status    int               `json:"status"`
	ErrorKind string            `json:"errorKind,omitempty"`
	Class     engine.Class      `json:"class"`
	By        string            `json:"by"`
	Headers   map[string]string `json:"headers,omitempty"`
	Excerpt   string            `json:"excerpt"`
	// Truncated says the body was longer than the excerpt.
	Truncated bool `json:"truncated,omitempty"`
}

// APIUnclassified is the answer of GET /gate/v1/failures/unclassified: the kept
// failures, newest first, and how many fell through since the server started.
type APIUnclassified struct {
	Failures []UnclassifiedFailure `json:"failures"`
	Capacity int                   `json:"capacity"`
	Total    uint64                `json:"total"`
}

const (
	// unclassifiedKeep is how many failures the list keeps (the oldest goes first).
	unclassifiedKeep = 200
	// unclassifiedExcerpt bounds the body kept of each, in bytes.
	unclassifiedExcerpt = 1024
	// unclassifiedHeaderValue bounds each kept header value, in bytes.
	unclassifiedHeaderValue = 256
	// unclassifiedHeaders bounds how many headers of a failure are kept.
	unclassifiedHeaders = 32
)

// unclassifiedLog is a bounded ring of the last unclassifiedKeep failures. The
// zero value is not usable; build it with newUnclassifiedLog. Safe for
// concurrent use; memory is bounded by keep × (excerpt + headers).
type unclassifiedLog struct {
	clock engine.Clock

	mu    sync.Mutex
	ring  []UnclassifiedFailure // len(ring) <= keep; ring[next] is the oldest once full
	next  int                   // where the next record goes
	total uint64                // records ever made
	keep  int
}

func newUnclassifiedLog(clock engine.Clock, keep int) *unclassifiedLog {
	return &unclassifiedLog{clock: clock, keep: keep}
}

// observe is the chain's verdict hook: it keeps f when v is a catch-all.
func (l *unclassifiedLog) observe(f *engine.Failure, v engine.Verdict) {
	if f == nil || (v.Class != engine.ClassUnknown && !rules.CatchAll(v.By)) {
		return
	}
	rec := UnclassifiedFailure{
		Time: l.clock.Now(), Provider: f.Provider, Model: f.Model, Status: f.Status, ErrorKind: f.ErrorKind,
		Class: v.Class, By: v.By, Headers: redactHeaders(f.Headers),
	}
	rec.Excerpt, rec.Truncated = redactBody(f.Body, unclassifiedExcerpt)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if len(l.ring) < l.keep {
		l.ring = append(l.ring, rec)
		return
	}
	l.ring[l.next] = rec
	l.next = (l.next + 1) % l.keep
}

// list returns the kept failures, newest first.
func (l *unclassifiedLog) list() APIUnclassified {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := APIUnclassified{Failures: make([]UnclassifiedFailure, 0, len(l.ring)), Capacity: l.keep, Total: l.total}
	for i := range l.ring {
		// The newest is just before next (or the last appended while filling).
		j := (l.next - 1 - i + 2*len(l.ring)) % len(l.ring)
		if len(l.ring) < l.keep {
			j = len(l.ring) - 1 - i
		}
		out.Failures = append(out.Failures, l.ring[j])
	}
	return out
}

func (a *api) handleUnclassified(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.s.unclassified.list())
}

// secretHeaders are blanked whatever their value.
var secretHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "x-api-key": true, "api-key": true,
	"x-goog-api-key": true, "cookie": true, "set-cookie": true,
}

const redacted = "[redacted]"

// redactHeaders copies h with credential headers blanked and values bounded;
// nil when h is empty.
func redactHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, min(len(h), unclassifiedHeaders))
	for k, v := range h {
		if len(out) == unclassifiedHeaders {
			break
		}
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "anthropic-ratelimit-"):
			// rate-limit counts (…-tokens, …-requests) are what a rule is written from
			v, _ = redactBody(v, unclassifiedHeaderValue)
			out[k] = v
		case secretHeaders[lk] || lk == "token" || strings.HasSuffix(lk, "-token") || strings.Contains(lk, "secret") || strings.HasSuffix(lk, "-key"):
			out[k] = redacted
		default:
			v, _ = redactBody(v, unclassifiedHeaderValue)
			out[k] = v
		}
	}
	return out
}

// redactFailure copies f for an event: credential headers blanked, credentials
// in the body masked, both bounded as the unclassified list keeps them. nil
// stays nil.
func redactFailure(f *engine.Failure) *engine.Failure {
	if f == nil {
		return nil
	}
	c := *f
	c.Headers = redactHeaders(f.Headers)
	c.Body, _ = redactBody(f.Body, unclassifiedExcerpt)
	return &c
}

// secretRE finds what looks like a credential in a body: OpenAI/Anthropic/
// DeepSeek-style sk- keys, bearer tokens, Google API keys, and key=value pairs
// whose key says it holds a key or a token.
var secretRE = regexp.MustCompile(`(?i)(\bsk-[a-z0-9_\-]{8,}|\bbearer\s+[a-z0-9._~+/\-]{12,}=*|\bAIza[0-9a-z_\-]{20,}|\b(?:api[_-]?key|access[_-]?token|secret|password)["']?\s*[:=]\s*["']?[^\s"',}]{6,})`)

// redactBody masks credentials in s and cuts it to n bytes (on a character
// boundary); truncated says it was cut.
func redactBody(s string, n int) (string, bool) {
	// Redact before cutting, so a key straddling the cut is still found; bound the
	// work on huge bodies by looking at a little more than is kept.
	if len(s) > 4*n {
		s = s[:4*n]
	}
	s = secretRE.ReplaceAllStringFunc(s, func(m string) string {
		lm := strings.ToLower(m)
		switch {
		case strings.HasPrefix(lm, "sk-"):
			return "sk-" + redacted
		case strings.HasPrefix(lm, "bearer"):
			return "Bearer " + redacted
		case strings.HasPrefix(lm, "aiza"):
			return redacted
		}
		if i := strings.IndexAny(m, ":="); i >= 0 {
			j := i + 1
			for j < len(m) && (m[j] == ' ' || m[j] == '"' || m[j] == '\'') {
				j++
			}
			return m[:j] + redacted
		}
		return redacted
	})
	if len(s) <= n {
		return s, false
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}
