package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gatectl/gatectl/balance"
	"github.com/gatectl/gatectl/engine"
	enginepool "github.com/gatectl/gatectl/engine/pool"
	"github.com/hashicorp/go-hclog"
)

func init() {
	balance.Register("wasm", func(s balance.Spec) (engine.BalanceSource, error) {
		if s.Modules == nil {
			return nil, &balance.FieldError{Field: "wasm", Err: errors.New("WebAssembly balance sources need a plugin host, and none was given (balance.Spec.Modules)")}
		}
		return s.Modules.NewBalance(context.Background(), s)
	})
}

// NewBalance implements balance.ModuleHost: the "wasm" balance kind, built
// through balance.New or balance.FromConfig with this host in Spec.Modules,
// loads its module here (see the package-level NewBalance).
func (h *Host) NewBalance(ctx context.Context, s balance.Spec) (engine.BalanceSource, error) {
	b, err := NewBalance(ctx, h, s)
	if err != nil {
		return nil, err // not a typed nil
	}
	return b, nil
}

// Balance is the "wasm" balance kind (engine.BalanceSource): the host GETs the URL
// the entry describes — its headers may carry the key as ${NAME}, NAME being the
// entry's apiKeyEnv, the only reference expanded — and hands the answer, whatever
// its status, to a module exporting gate_balance:
//
//	{"nowMs": 1767225600000, "config": {...},
//	 "fetch": {"status": 200, "headers": {"content-type": "application/json"}, "body": "..."}}
//
// Header names are lower-cased (first value each); the body is text, cut to
// MaxBodyBytes (256 KiB by default). The module returns a reading in the balance
// script contract (balance.ParseReading) or 1 for "no reading". No network, no
// clock but nowMs, no key inside the sandbox: the module never sees the request's
// headers. Errors never carry the key, the body or the module's output.
//
// A Balance is immutable and safe for concurrent use.
type Balance struct {
	p         *Plugin
	url       string
	headers   balance.Headers
	lookupEnv func(string) (string, bool)
	client    *http.Client // nil: balance.Fetch's, which keeps the key within the URL's origin
	timeout   time.Duration
	config    json.RawMessage
	clock     engine.Clock
	logger    hclog.Logger
}

// NewBalance builds a wasm balance source from s.Wasm (its Module path already
// resolved), s.APIKeyEnv, s.Timeout, s.LookupEnv, s.HTTPClient and s.Logger,
// loading the module on h. Construction errors are *balance.FieldError naming the
// field ("wasm.url", "wasm.headers[X]", "wasm.module").
func NewBalance(ctx context.Context, h *Host, s balance.Spec) (*Balance, error) {
	w := s.Wasm
	if w == nil {
		return nil, &balance.FieldError{Field: "wasm", Err: errors.New("missing")}
	}
	if strings.ContainsAny(s.APIKeyEnv, "=\x00") {
		return nil, &balance.FieldError{Field: "apiKeyEnv", Err: fmt.Errorf("invalid variable name %q", s.APIKeyEnv)}
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &balance.FieldError{Field: "wasm.url", Err: errors.New("want an absolute http or https URL")}
	}
	if strings.Contains(w.URL, "${") {
		return nil, &balance.FieldError{Field: "wasm.url", Err: errors.New("takes no ${…} references; put the key in a header")}
	}
	hs, err := balance.NewHeaders("wasm.headers", w.Headers, s.APIKeyEnv)
	if err != nil {
		return nil, err
	}
	cfg, err := canonicalConfig(w.Config)
	if err != nil {
		return nil, &balance.FieldError{Field: "wasm.config", Err: err}
	}
	if w.Module == "" {
		return nil, &balance.FieldError{Field: "wasm.module", Err: errors.New("is required")}
	}
	p, err := h.Load(ctx, w.Module, Options{Kind: KindBalance, Config: w.Config})
	if err != nil {
		return nil, &balance.FieldError{Field: "wasm.module", Err: err}
	}
	b := &Balance{
		p:         p,
		url:       w.URL,
		headers:   hs,
		lookupEnv: s.LookupEnv,
		client:    s.HTTPClient,
		timeout:   s.Timeout,
		config:    cfg,
		clock:     h.clock,
		logger:    s.Logger,
	}
	if b.timeout <= 0 {
		b.timeout = enginepool.DefaultBalanceTimeout
	}
	if b.logger == nil {
		b.logger = hclog.NewNullLogger()
	}
	return b, nil
}

// Plugin returns the plugin behind the source.
func (b *Balance) Plugin() *Plugin { return b.p }

// Close gives the plugin handle back.
func (b *Balance) Close() error { return b.p.Close() }

// balanceInput is what gate_balance reads.
type balanceInput struct {
	NowMs  int64           `json:"nowMs"`
	Config json.RawMessage `json:"config"`
	Fetch  fetchInput      `json:"fetch"`
}

type fetchInput struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// Read fetches the URL and has the module map the answer, all within the source's
// timeout (the module's own call is bounded by its deadline, 50ms by default).
func (b *Balance) Read(parent context.Context) (engine.Reading, error) {
	ctx, cancel := context.WithTimeout(parent, b.timeout)
	defer cancel()
	header, err := b.headers.Build(b.lookupEnv)
	if err != nil {
		return engine.Reading{}, err
	}
	resp, err := balance.Fetch(ctx, b.client, b.url, header)
	if err != nil {
		return engine.Reading{}, err
	}
	in := balanceInput{NowMs: b.clock.Now().UnixMilli(), Config: b.config, Fetch: fetchInput{
		Status:  resp.Status,
		Headers: make(map[string]string, len(resp.Header)),
		Body:    truncateUTF8(string(resp.Body), b.p.s.limits.MaxBodyBytes),
	}}
	for k, vs := range resp.Header {
		if len(vs) > 0 {
			in.Fetch.Headers[strings.ToLower(k)] = vs[0]
		}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return engine.Reading{}, fmt.Errorf("wasm: %s: input: %w", b.p.Name(), err)
	}
	var r engine.Reading
	abstain, err := b.p.call(ctx, data, func(out []byte) error {
		var perr error
		r, perr = balance.ParseReading(out)
		return perr
	})
	switch {
	case err != nil:
		return engine.Reading{}, err
	case abstain:
		return engine.Reading{}, fmt.Errorf("%w: %s: the module gave no reading (status %d)", ErrOutput, b.p.Name(), resp.Status)
	}
	b.logger.Debug("wasm reading", "windows", len(r.Windows), "remaining", r.Remaining != nil)
	return r, nil
}

var (
	_ engine.BalanceSource = (*Balance)(nil)
	_ io.Closer            = (*Balance)(nil)
	_ balance.ModuleHost   = (*Host)(nil)
)
