package server

import (
	"encoding/json"
	"net/http"
)

// apiError is the JSON body of every error the decision API (and the proxy, for
// errors of its own) returns: a message, and the request field at fault if any.
type apiError struct {
	Error struct {
		Message string `json:"message"`
		Field   string `json:"field,omitempty"`
		Type    string `json:"type"`
	} `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers status with {"error":{"message","field","type"}}, a shape
// OpenAI and Anthropic clients both surface.
func writeError(w http.ResponseWriter, status int, field, msg string) {
	var e apiError
	e.Error.Message, e.Error.Field = msg, field
	switch {
	case status == http.StatusTooManyRequests:
		e.Error.Type = "rate_limit_error"
	case status >= 500:
		e.Error.Type = "gatectl_error"
	default:
		e.Error.Type = "invalid_request_error"
	}
	writeJSON(w, status, e)
}
