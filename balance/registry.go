package balance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/hashicorp/go-hclog"
)

// Spec describes one balance source: exactly one of Script, HTTP or Wasm is set,
// and that choice is its kind ("script", "http", "wasm"). The remaining fields are
// shared by every kind. A Spec is a plain value; New does not keep it.
type Spec struct {
	// Provider is the configured provider the source reports on; it names the
	// source in logs.
	Provider string
	// Dir is the working directory of a script, and what a relative executable path
	// (one with a slash, "./balance.sh") is resolved against: the config file's
	// directory. "" means the process's own working directory.
	Dir string

	Script []string  // argv, never a shell
	HTTP   *HTTPSpec // GET and map with expr
	Wasm   *WasmSpec // GET and hand the response to a gate/v1 balance module

	// APIKeyEnv names the environment variable holding the key. A script receives
	// it under that same name; an HTTP header may reference it as ${NAME}. It is
	// looked up on every read, so a rotated key reaches the next one.
	APIKeyEnv string
	// Env holds literal entries a script receives (base URL, region, proxy). Never
	// a secret: secrets come through APIKeyEnv.
	Env map[string]string
	// Timeout bounds one read; 0 means pool.DefaultBalanceTimeout.
	Timeout time.Duration

	// LookupEnv reads the process environment (the key, PATH, HOME); nil means
	// os.LookupEnv. Tests inject a map.
	LookupEnv func(string) (string, bool)
	// HTTPClient is used by the http and wasm kinds; nil means a client with no
	// timeout of its own (each read is bounded by Timeout through its context)
	// that follows a redirect only within the URL's origin (the request's
	// headers hold the key: sameorigin.CheckRedirect).
	HTTPClient *http.Client
	// Logger receives the source's own debug lines; nil discards them.
	Logger hclog.Logger
	// Modules loads the module of a source whose reading comes out of a plugin
	// (the "wasm" kind); nil makes such a source refuse to build. The other kinds
	// ignore it.
	Modules ModuleHost
}

// ModuleHost loads plugin modules for the balance kinds that run one: the "wasm"
// kind's factory hands its Spec to NewBalance. *wasm.Host implements it (balance
// cannot name that type: wasm imports balance). Whoever builds the sources passes
// it in Spec.Modules or BuildOptions.Modules; there is no process-wide default.
type ModuleHost interface {
	// NewBalance builds the source s describes (s.Wasm set), loading its module.
	// Called once per source, while a snapshot is built; the source holds what
	// it loaded until it is closed (io.Closer).
	NewBalance(ctx context.Context, s Spec) (engine.BalanceSource, error)
}

// HTTPSpec is the "http" kind: GET URL with Headers, then evaluate the expressions
// over the decoded JSON response. See NewHTTP.
type HTTPSpec struct {
	URL     string
	Headers map[string]string
	// Remaining, Windows and ResetsAt are expr expressions over `body` (the decoded
	// JSON), `status` (int) and `headers` (lower-cased names, first value). At least
	// one of Remaining and Windows is required.
	Remaining string
	Windows   string
	ResetsAt  string
}

// WasmSpec is the "wasm" kind, built by the wasm package: the host GETs URL (see
// Fetch) and hands the response to a gate/v1 module exporting gate_balance.
type WasmSpec struct {
	Module  string // path to the .wasm file, resolved against Dir
	URL     string
	Headers map[string]string
	Config  map[string]any
}

// Kind reports which kind of source s describes, or an error when it sets none or
// more than one of Script, HTTP and Wasm.
func (s Spec) Kind() (string, error) {
	var kinds []string
	if len(s.Script) > 0 {
		kinds = append(kinds, "script")
	}
	if s.HTTP != nil {
		kinds = append(kinds, "http")
	}
	if s.Wasm != nil {
		kinds = append(kinds, "wasm")
	}
	switch len(kinds) {
	case 0:
		return "", &FieldError{Field: "script", Err: fmt.Errorf("set one of script, http or wasm")}
	case 1:
		return kinds[0], nil
	}
	return "", &FieldError{Field: kinds[1], Err: fmt.Errorf("set only one of script, http or wasm (got %s)", strings.Join(kinds, " and "))}
}

func (s Spec) lookupEnv(name string) (string, bool) {
	if s.LookupEnv != nil {
		return s.LookupEnv(name)
	}
	return os.LookupEnv(name)
}

func (s Spec) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return pool.DefaultBalanceTimeout
}

func (s Spec) logger() hclog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return hclog.NewNullLogger()
}

// Factory builds a source of one kind from a Spec. It compiles and validates
// everything it can, so a bad Spec fails here (with a *FieldError) and never on a
// read, and it has no side effects: no process, no request.
type Factory func(Spec) (engine.BalanceSource, error)

var registry = struct {
	sync.RWMutex
	kinds map[string]Factory
}{kinds: map[string]Factory{}}

// Register makes a kind of source available to New. It is called from init(); an
// empty kind, a nil factory or a kind registered twice panics at startup.
func Register(kind string, f Factory) {
	if kind == "" || f == nil {
		panic("balance: Register needs a kind and a factory")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.kinds[kind]; dup {
		panic(fmt.Sprintf("balance: kind %q registered twice", kind))
	}
	registry.kinds[kind] = f
}

// Kinds lists the registered kinds, sorted.
func Kinds() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.kinds))
	for k := range registry.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// New builds the source s describes with the factory registered for its kind. The
// source is uncached: wrap it in NewCached (FromConfig does both).
func New(s Spec) (engine.BalanceSource, error) {
	kind, err := s.Kind()
	if err != nil {
		return nil, err
	}
	registry.RLock()
	f := registry.kinds[kind]
	registry.RUnlock()
	if f == nil {
		return nil, &FieldError{Field: kind, Err: fmt.Errorf("no %q balance source is registered (have: %s)", kind, strings.Join(Kinds(), ", "))}
	}
	return f(s)
}
