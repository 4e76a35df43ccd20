package server

// Redaction: gatectl's own secrets never go back to a client, even when an
// upstream echoes them (an error body quoting the Authorization header, a debug
// header repeating the key).

import (
	"bytes"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/gatectl/gatectl/config"
)

// redactedText replaces every secret in what reaches a client.
const redactedText = "[redacted]"

// minSecretLen: a "secret" shorter than this is not redacted. Replacing every
// occurrence of a 1–5 byte string would mangle ordinary text and still not hide a
// key that short; no real provider key is that short.
const minSecretLen = 6

// redactor replaces the configured secrets' values in bytes and headers. Its
// zero value (no secrets) changes nothing. It is immutable once built and safe
// for concurrent use.
type redactor struct {
	secrets []string // longest first, so a secret containing another is replaced whole
	r       *strings.Replacer
}

// secretEnvNames are the environment variables whose values gatectl sends on
// its own behalf under cfg: every provider's apiKeyEnv and ${NAME} in its
// headers, every balance source's apiKeyEnv and ${NAME} in its headers, and the
// extra names (the API token's variable).
func secretEnvNames(cfg *config.Config, extra ...string) []string {
	var names []string
	add := func(n string) {
		if n != "" {
			names = append(names, n)
		}
	}
	addHeaders := func(h map[string]string) {
		for _, v := range h {
			for _, m := range envRef.FindAllStringSubmatch(v, -1) {
				add(m[1])
			}
		}
	}
	for _, pc := range cfg.Providers {
		add(pc.APIKeyEnv)
		addHeaders(pc.Headers)
	}
	for _, b := range cfg.Balances {
		add(b.APIKeyEnv)
		if b.HTTP != nil {
			addHeaders(b.HTTP.Headers)
		}
		if b.Wasm != nil {
			addHeaders(b.Wasm.Headers)
		}
	}
	add(cfg.API.TokenEnv)
	add("GATECTL_TOKEN") // the CLI's and the container's way to pass the token
	for _, n := range extra {
		add(n)
	}
	return names
}

var envRef = regexp.MustCompile(`\$\{([^}]+)\}`)

// newRedactor builds the redactor of the given secret values (empty and short
// ones are skipped).
func newRedactor(values []string) *redactor {
	seen := map[string]bool{}
	var secrets []string
	for _, v := range values {
		v = strings.TrimSpace(v)
		if len(v) < minSecretLen || seen[v] {
			continue
		}
		seen[v] = true
		secrets = append(secrets, v)
	}
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	rd := &redactor{secrets: secrets}
	if len(secrets) > 0 {
		pairs := make([]string, 0, 2*len(secrets))
		for _, s := range secrets {
			pairs = append(pairs, s, redactedText)
		}
		rd.r = strings.NewReplacer(pairs...)
	}
	return rd
}

// bytes returns b with every secret replaced; b itself when it holds none.
func (rd *redactor) bytes(b []byte) []byte {
	if rd == nil || rd.r == nil || !rd.containsAny(b) {
		return b
	}
	return []byte(rd.r.Replace(string(b)))
}

func (rd *redactor) containsAny(b []byte) bool {
	for _, s := range rd.secrets {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// header replaces every secret in h's values, in place.
func (rd *redactor) header(h http.Header) {
	if rd == nil || rd.r == nil {
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			if nv := rd.r.Replace(v); nv != v {
				h[k][i] = nv
			}
		}
	}
}

// redactorCache holds the redactor of the snapshot config last asked for. The
// values are read from the environment when a config is first seen (keys are
// read there at send time too); a reload builds a new one.
type redactorCache struct {
	cur atomic.Pointer[redactorFor]
	// extraEnv names secret variables beyond the config's providers and balances
	// (the API token's).
	extraEnv []string
}

type redactorFor struct {
	cfg *config.Config
	rd  *redactor
}

// get returns the redactor of cfg's secrets.
func (c *redactorCache) get(cfg *config.Config) *redactor {
	if cur := c.cur.Load(); cur != nil && cur.cfg == cfg {
		return cur.rd
	}
	var values []string
	for _, n := range secretEnvNames(cfg, c.extraEnv...) {
		values = append(values, os.Getenv(n))
	}
	rd := newRedactor(values)
	c.cur.Store(&redactorFor{cfg: cfg, rd: rd})
	return rd
}
