package server

// Reading a client's request: proxyRequest and parseProxyRequest (body, max tokens, X-Gate-* headers).

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

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
	size        int
	session     string
	turn        string
	priority    gate.Priority
}

// turnSeq numbers requests that name no turn: each is a turn of its own.
var turnSeq atomic.Uint64

func parseProxyRequest(ep *endpoint, body []byte, h http.Header) (*proxyRequest, string, error) {
	pr := &proxyRequest{ep: ep, size: len(body)}
	if err := json.Unmarshal(body, &pr.fields); err != nil || pr.fields == nil {
		return nil, "", errors.New("the body must be a JSON object")
	}
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
			return nil, f, fmt.Errorf("%s must be a non-negative number", f)
		}
		pr.maxTokens = max(pr.maxTokens, int(n))
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
