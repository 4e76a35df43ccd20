package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gatectl/gatectl/config"
)

// defaultAddr is where `gatectl serve` listens without a config.
const defaultAddr = "http://127.0.0.1:7878"

// addrFlag is the --addr flag of the commands that talk to a running server.
func addrFlag(usage string) *cli.StringFlag {
	return &cli.StringFlag{Name: "addr", Value: defaultAddr, Usage: usage}
}

// apiClientTimeout bounds one call to the server (a routes refresh waits for the
// balance sources that are due, each bounded by its own timeout).
const apiClientTimeout = 30 * time.Second

// apiBase normalises --addr: a bare host:port gets http://, a trailing slash goes.
func apiBase(addr string) (string, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("--addr %q: want a URL such as %s", addr, defaultAddr)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// apiGet fetches path (with query) from the server at addr into out. Errors say
// what went wrong for people: an unreachable server, or the server's own message.
func apiGet(ctx context.Context, addr, path string, out any) error {
	return apiCall(ctx, http.MethodGet, addr, path, out)
}

// apiPost posts to path (an action that takes no body) and decodes the answer
// into out, as apiGet does.
func apiPost(ctx context.Context, addr, path string, out any) error {
	return apiCall(ctx, http.MethodPost, addr, path, out)
}

// apiPut sends body (JSON) to path with PUT and decodes the answer into out,
// as apiGet does.
func apiPut(ctx context.Context, addr, path string, body []byte, out any) error {
	return apiSend(ctx, http.MethodPut, addr, path, body, out)
}

func apiCall(ctx context.Context, method, addr, path string, out any) error {
	return apiSend(ctx, method, addr, path, nil, out)
}

// apiSend is one call; body, when not nil, is sent as JSON.
func apiSend(ctx context.Context, method, addr, path string, body []byte, out any) error {
	base, err := apiBase(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, apiClientTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	token, tokenFrom, missing := apiToken()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach gatectl at %s (is `gatectl serve` running? --addr says where): %w", base, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of %s: %w", base+path, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		if token == "" {
			return &apiStatusError{Status: resp.StatusCode, Message: base + " needs the API token: " + missing}
		}
		return &apiStatusError{Status: resp.StatusCode, Message: base + " refused the API token from " + tokenFrom}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(answer, &e) == nil && e.Error.Message != "" {
			return &apiStatusError{Status: resp.StatusCode, Message: e.Error.Message}
		}
		return &apiStatusError{Status: resp.StatusCode, Message: fmt.Sprintf("%s answered %s", base+path, resp.Status)}
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("%s: not the answer of a gatectl server: %w", base+path, err)
	}
	return nil
}

// apiToken is the token the commands send to a server, and where it came from
// (for the error when the server refuses it; the token itself is never printed):
// GATECTL_TOKEN, else the variable named by api.tokenEnv of the config in
// GATECTL_CONFIG. "" when there is none: a server without a token needs none;
// one that wants a token is told missing — where to put it, and when
// GATECTL_CONFIG is set, why it gave none (the config does not load, names no
// api.tokenEnv, or names a variable that is unset).
func apiToken() (token, from, missing string) {
	if t := os.Getenv("GATECTL_TOKEN"); t != "" {
		return t, "GATECTL_TOKEN", ""
	}
	path := os.Getenv("GATECTL_CONFIG")
	if path == "" {
		return "", "", "set GATECTL_TOKEN, or GATECTL_CONFIG to a config whose api.tokenEnv names the variable holding it"
	}
	cfg, err := config.Load(path)
	switch {
	case err != nil:
		return "", "", fmt.Sprintf("GATECTL_CONFIG (%s) does not load (gatectl check %s says why); set GATECTL_TOKEN", path, path)
	case cfg.API.TokenEnv == "":
		return "", "", fmt.Sprintf("GATECTL_CONFIG (%s) names no api.tokenEnv; set GATECTL_TOKEN", path)
	}
	return os.Getenv(cfg.API.TokenEnv), cfg.API.TokenEnv + " (api.tokenEnv of " + path + ")",
		fmt.Sprintf("%s (api.tokenEnv of GATECTL_CONFIG, %s) is unset or empty; set it, or GATECTL_TOKEN", cfg.API.TokenEnv, path)
}

// apiStatusError is a non-200 answer from the server.
type apiStatusError struct {
	Status  int
	Message string
}

func (e *apiStatusError) Error() string { return e.Message }

// isNotFound reports whether err is the server's 404.
func isNotFound(err error) bool {
	var se *apiStatusError
	return errors.As(err, &se) && se.Status == http.StatusNotFound
}
