package server

// The proxy's two faces answer errors in their own protocol's shape, so each
// SDK turns them into its own typed errors (the Anthropic SDK shows an
// OpenAI-shaped body as raw JSON):
//
//	OpenAI:    {"error":{"message","type","field"}}            (writeError)
//	Anthropic: {"type":"error","error":{"type","message"}}    (writeAnthropicError)
//
// Every error of the proxy goes through writeFaceError (or exchange.fail), which
// picks the shape from the endpoint's kind; headers set before (Retry-After,
// X-Should-Retry, X-Gate-*) are kept.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// writeFaceError answers status with msg in the shape of the face kind.
func writeFaceError(w http.ResponseWriter, kind apiKind, status int, field, msg string) {
	if kind == kindAnthropic {
		writeAnthropicError(w, status, field, msg)
		return
	}
	writeError(w, status, field, msg)
}

// fail answers the exchange's client with an error of gatectl's own, in its
// face's shape; once a held stream's headers went out (proxy_hold.go), as the
// face's error event in the stream.
func (x *exchange) fail(status int, field, msg string) {
	if x.sseStarted {
		x.failInStream(status, msg, nil)
		return
	}
	writeFaceError(x.w, x.pr.ep.kind, status, field, msg)
}

// anthropicError is the body of every error on the Anthropic face.
type anthropicError struct {
	Type  string `json:"type"` // always "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Field   string `json:"field,omitempty"` // gatectl's: the request field at fault
	} `json:"error"`
}

// writeAnthropicError answers status with Anthropic's error shape.
func writeAnthropicError(w http.ResponseWriter, status int, field, msg string) {
	var e anthropicError
	e.Type = "error"
	e.Error.Type, e.Error.Message, e.Error.Field = anthropicErrorType(status), msg, field
	writeJSON(w, status, e)
}

// anthropicErrorType is the error.type Anthropic's API gives a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	switch {
	case status >= 500:
		return "api_error"
	case status >= 400:
		return "invalid_request_error"
	}
	return "api_error"
}

// anthropicErrorStatus is the status Anthropic's API answers an error.type
// with; 0 for a type it does not know.
func anthropicErrorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "api_error":
		return http.StatusInternalServerError
	case "overloaded_error":
		return 529
	case "timeout_error":
		return http.StatusGatewayTimeout
	}
	return 0
}

// openaiErrorStatus is the status OpenAI's API answers an error code or type
// with; 0 for one it does not know. A Responses stream's error event names
// only its code ("server_error"), a chat stream's error chunk its type.
func openaiErrorStatus(code string) int {
	switch code {
	case "server_error":
		return http.StatusInternalServerError
	case "rate_limit_exceeded", "insufficient_quota":
		return http.StatusTooManyRequests
	case "invalid_request_error", "invalid_prompt", "context_length_exceeded":
		return http.StatusBadRequest
	case "invalid_api_key", "authentication_error":
		return http.StatusUnauthorized
	case "model_not_found":
		return http.StatusNotFound
	}
	return 0
}

// errorStatus is the status an upstream failure is classified with: status,
// unless it is a success that carried an error (a stream's first or later
// error event, a 200 body with "error"), which stands for the status its type
// or code names. Classified as a 200, Anthropic's api_error and the Responses
// API's server_error came out UNKNOWN: not retried, x-should-retry false.
func errorStatus(status int, body []byte) int {
	if status >= 400 || len(body) == 0 {
		return status
	}
	var e struct {
		Type  string `json:"type"`
		Code  any    `json:"code"`
		Error *struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return status
	}
	var names []string // most specific first
	if e.Error != nil {
		if c, ok := e.Error.Code.(string); ok {
			names = append(names, c)
		}
		names = append(names, e.Error.Type)
	}
	if c, ok := e.Code.(string); ok {
		names = append(names, c)
	}
	for _, n := range names {
		if c := anthropicErrorStatus(n); c != 0 {
			return c
		}
		if c := openaiErrorStatus(n); c != 0 {
			return c
		}
	}
	return status
}

// faceBody is what the client of face kind gets for an upstream error body
// answered with status: unchanged when it already has the face's shape (or the
// face is OpenAI's, whose clients read any JSON error), otherwise rewritten into
// Anthropic's shape with the upstream's message (rewritten). A 200 that
// carried an error (a stream's first event) gets the status its error type
// stands for, else 502.
func faceBody(kind apiKind, status int, body []byte, route string) (code int, out []byte, rewritten bool) {
	if kind != kindAnthropic {
		if status < 400 {
			status = http.StatusBadGateway
		}
		if out, ok := responsesErrorBody(body); ok {
			return status, out, true
		}
		return status, body, false
	}
	var ae anthropicError
	if json.Unmarshal(body, &ae) == nil && ae.Type == "error" && ae.Error.Type != "" && ae.Error.Message != "" {
		if status < 400 {
			status = anthropicErrorStatus(ae.Error.Type)
			if status == 0 {
				status = http.StatusBadGateway
			}
		}
		return status, body, false
	}
	if status < 400 {
		status = http.StatusBadGateway
	}
	var e anthropicError
	e.Type = "error"
	e.Error.Type, e.Error.Message = anthropicErrorType(status), upstreamMessage(body, route, status)
	out, _ = json.Marshal(e)
	return status, out, true
}

// responsesErrorBody rewrites a Responses stream's error event
// ({"type":"error","code","message","param"}) into the {"error":{…}} body
// OpenAI answers an error with, which the SDKs read; ok is false for any
// other body.
func responsesErrorBody(body []byte) (out []byte, ok bool) {
	var ev struct {
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
		Param   json.RawMessage `json:"param"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.Type != "error" || ev.Message == "" || len(ev.Error) > 0 {
		return nil, false
	}
	var e struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
			Param   json.RawMessage `json:"param"`
		} `json:"error"`
	}
	e.Error.Message, e.Error.Code, e.Error.Param = ev.Message, nullIfEmpty(ev.Code), nullIfEmpty(ev.Param)
	var code string
	if json.Unmarshal(ev.Code, &code) == nil && code != "" {
		e.Error.Type = code // the Responses API's codes are its error types ("server_error")
	} else {
		e.Error.Type = "server_error"
	}
	out, err := json.Marshal(e)
	return out, err == nil
}

func nullIfEmpty(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// upstreamMessage is the message of an upstream error body: an OpenAI-shaped
// error's message, a bare {"message"}, or the start of the text.
func upstreamMessage(body []byte, route string, status int) string {
	var oe struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &oe) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(oe.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(oe.Error, &s) == nil && s != "":
			return s
		case oe.Message != "":
			return oe.Message
		}
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 512 {
		text = strings.ToValidUTF8(text[:512], "") + "…"
	}
	if text == "" {
		return fmt.Sprintf("upstream %s answered %d with no body", route, status)
	}
	return fmt.Sprintf("upstream %s answered %d: %s", route, status, text)
}
