package server

// Reading a client's request: proxyRequest and parseProxyRequest (body, max tokens, X-Gate-* headers).

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

// proxyRequest is a client's request as gatectl reads it.
type proxyRequest struct {
	ep          *endpoint
	fields      map[string]json.RawMessage
	model       string
	stream      bool
	clientUsage bool // the client asked for stream_options.include_usage itself
	maxTokens   int
	size        int // what the input is estimated from: the body's bytes, inline media counted apart (inputSize)
	session     string
	turn        string
	// oneShot says turn was named here, not by X-Gate-Turn: the request is a
	// turn of its own, whose retry budget ends with it (retry.Request.OneShot).
	oneShot  bool
	priority gate.Priority
	// maxWait is what X-Gate-Max-Wait asks: how long a non-streamed request
	// may be held (0: proxy.maxHold).
	maxWait time.Duration
}

// turnSeq numbers requests that name no turn: each is a turn of its own.
var turnSeq atomic.Uint64

func parseProxyRequest(ep *endpoint, body []byte, h http.Header) (*proxyRequest, string, error) {
	pr := &proxyRequest{ep: ep}
	if err := json.Unmarshal(body, &pr.fields); err != nil || pr.fields == nil {
		return nil, "", errors.New("the body must be a JSON object")
	}
	pr.size = inputSize(body, pr.fields)
	if raw, ok := pr.fields["model"]; ok {
		if err := json.Unmarshal(raw, &pr.model); err != nil {
			return nil, "model", errors.New("model must be a string")
		}
	}
	if raw, ok := pr.fields["stream"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &pr.stream); err != nil {
			return nil, "stream", errors.New("stream must be a boolean")
		}
	}
	if raw, ok := pr.fields["stream_options"]; ok {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		_ = json.Unmarshal(raw, &so)
		pr.clientUsage = so.IncludeUsage
	}
	for _, f := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		raw, ok := pr.fields[f]
		if !ok || string(raw) == "null" {
			continue
		}
		var n float64
		if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > math.MaxInt32 {
			return nil, f, fmt.Errorf("%s must be a number from 0 to %d (got %s)", f, math.MaxInt32, raw)
		}
		pr.maxTokens = max(pr.maxTokens, int(n))
	}
	if pr.maxTokens == 0 && ep.defaultMaxTokens > 0 {
		pr.maxTokens = ep.defaultMaxTokens // the API's own default, which it writes at most
	}
	if ep.noOutput {
		pr.maxTokens = 1 // embeddings write nothing: reserve (almost) no output
	}
	pr.session = strings.TrimSpace(h.Get("X-Gate-Session"))
	pr.turn = strings.TrimSpace(h.Get("X-Gate-Turn"))
	// Names key budgets, sessions and the state file: the proxy takes exactly the
	// ids the decision API takes (apiCheckName), so every session can be inspected
	// there, and a model name never carries a control byte into a bucket, a
	// header or a metric label.
	for _, hv := range []struct{ name, v string }{{"X-Gate-Session", pr.session}, {"X-Gate-Turn", pr.turn}, {"model", pr.model}} {
		if err := apiCheckName(hv.name, hv.v); err != nil {
			return nil, hv.name, err
		}
	}
	if pr.turn == "" {
		pr.turn = "req-" + strconv.FormatUint(turnSeq.Add(1), 36)
		pr.oneShot = true
	}
	if v := strings.TrimSpace(h.Get("X-Gate-Max-Wait")); v != "" {
		d, err := parseWaitHeader(v)
		if err != nil {
			return nil, "X-Gate-Max-Wait", err
		}
		pr.maxWait = d
	}
	switch p := strings.ToLower(strings.TrimSpace(h.Get("X-Gate-Priority"))); p {
	case "", "interactive":
		pr.priority = gate.PriorityInteractive
	case "batch":
		pr.priority = gate.PriorityBatch
	default:
		return nil, "X-Gate-Priority", fmt.Errorf("X-Gate-Priority %q is invalid; choices are [interactive batch]", p)
	}
	return pr, "", nil
}

// parseWaitHeader reads X-Gate-Max-Wait: a Go duration ("90s", "10m") or a
// number of seconds ("90"), positive.
func parseWaitHeader(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || f > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("X-Gate-Max-Wait %q is invalid: give a duration such as 90s or 10m, or a number of seconds", v)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("X-Gate-Max-Wait %q must be positive", v)
	}
	return d, nil
}

// defaultSession names the session of a request without X-Gate-Session: one
// per client key (a hash of its Authorization or x-api-key value, never the key
// itself), else one per client address. Without it every such request would
// share the session "", and with it one client's pool choice and budgets.
func defaultSession(h http.Header, remoteAddr string) string {
	key := strings.TrimSpace(h.Get("Authorization"))
	if key == "" {
		key = strings.TrimSpace(h.Get("X-Api-Key"))
	}
	if key != "" {
		sum := sha256.Sum256([]byte(key))
		return "key-" + hex.EncodeToString(sum[:8])
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	if len(host) > 64 { // a listener's address form, bounded all the same
		host = host[:64]
	}
	return "addr-" + host
}
