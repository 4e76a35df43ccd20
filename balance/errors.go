package balance

import (
	"errors"
	"fmt"
)

// The reasons a read yields no reading. Every error a source returns wraps one of
// them (or the caller's context error), so callers match with errors.Is. None of
// them ever carries a script's output or a response body.
var (
	// ErrTimeout: the read did not finish within the source's timeout.
	ErrTimeout = errors.New("balance: timed out")
	// ErrExit: the script exited with a non-zero status or was killed by a signal.
	ErrExit = errors.New("balance: script failed")
	// ErrStart: the script could not be started (missing executable, bad directory).
	ErrStart = errors.New("balance: script did not start")
	// ErrOutput: the output is not the contract's JSON object (or is too large).
	ErrOutput = errors.New("balance: output is not a reading")
	// ErrStatus: the HTTP endpoint answered with a non-2xx status.
	ErrStatus = errors.New("balance: unexpected HTTP status")
	// ErrTransport: the HTTP request got no answer (refused, reset, DNS, TLS).
	ErrTransport = errors.New("balance: request failed")
	// ErrMapping: an expression over the response failed or yielded the wrong type.
	ErrMapping = errors.New("balance: mapping failed")
	// ErrNoKey: the request needs the key named by apiKeyEnv, and it is not set.
	ErrNoKey = errors.New("balance: api key not set")
	// ErrPanic: the source panicked; Cached recovers and reports it as a failed read.
	ErrPanic = errors.New("balance: source panicked")
	// ErrClosed: the Cached was closed (its snapshot was replaced or the daemon is
	// stopping); it reads no more.
	ErrClosed = errors.New("balance: source closed")
)

// ErrInvalid is the sentinel every construction error wraps (a bad Spec).
var ErrInvalid = errors.New("invalid balance source")

// FieldError is a construction error tied to one field of a balance entry, named
// relative to the entry ("http.remaining", "env[TOKEN]", "script[0]"). FromConfig
// prefixes it with the entry's path ("balances[2].http.remaining").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalid) true for every FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}
