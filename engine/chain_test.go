package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
)

// fakeClassifier answers from its fields; it records how often it was asked.
type fakeClassifier struct {
	name    string
	v       Verdict
	decided bool
	err     error
	panics  bool
	detail  []string

	mu    sync.Mutex
	calls int
}

func (f *fakeClassifier) Name() string { return f.name }

func (f *fakeClassifier) Classify(ctx context.Context, _ *Failure) (Verdict, bool, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.panics {
		panic("boom")
	}
	return f.v, f.decided, f.err
}

type explainingClassifier struct{ *fakeClassifier }

func (e explainingClassifier) Explain(context.Context, *Failure) []string { return e.detail }

func decides(name string, c Class) *fakeClassifier {
	return &fakeClassifier{name: name, v: Verdict{Class: c, By: name + "/r"}, decided: true}
}
func abstains(name string) *fakeClassifier { return &fakeClassifier{name: name} }
func fails(name string) *fakeClassifier {
	return &fakeClassifier{name: name, err: errors.New("trapped")}
}

func TestChainClassify(t *testing.T) {
	tests := []struct {
		name      string
		links     []Classifier
		wantClass Class
		wantBy    string
		wantErrs  map[string]uint64
		wantHook  []string
	}{
		{"empty", nil, ClassUnknown, ByChainNone, map[string]uint64{}, nil},
		{"first decides", []Classifier{decides("a", ClassRateLimit), decides("b", ClassQuota)}, ClassRateLimit, "a/r", map[string]uint64{"a": 0, "b": 0}, nil},
		{"abstain falls through", []Classifier{abstains("a"), decides("b", ClassQuota)}, ClassQuota, "b/r", map[string]uint64{"a": 0, "b": 0}, nil},
		{"error falls through", []Classifier{fails("a"), decides("b", ClassAuth)}, ClassAuth, "b/r", map[string]uint64{"a": 1, "b": 0}, []string{"a"}},
		{"panic falls through", []Classifier{&fakeClassifier{name: "p", panics: true}, decides("b", ClassServer)}, ClassServer, "b/r", map[string]uint64{"p": 1, "b": 0}, []string{"p"}},
		{"decided with error is an error", []Classifier{&fakeClassifier{name: "a", v: Verdict{Class: ClassQuota}, decided: true, err: errors.New("x")}, decides("b", ClassServer)}, ClassServer, "b/r", map[string]uint64{"a": 1, "b": 0}, []string{"a"}},
		{"decided without class is an error", []Classifier{&fakeClassifier{name: "a", decided: true}, abstains("b")}, ClassUnknown, ByChainNone, map[string]uint64{"a": 1, "b": 0}, []string{"a"}},
		{"nobody decides", []Classifier{abstains("a"), fails("b")}, ClassUnknown, ByChainNone, map[string]uint64{"a": 0, "b": 1}, []string{"b"}},
		{"nil links dropped", []Classifier{nil, decides("b", ClassContext), nil}, ClassContext, "b/r", map[string]uint64{"b": 0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hooked []string
			c := NewChain(tt.links...).WithErrorHook(func(link string, err error) {
				if err == nil {
					t.Errorf("hook called with a nil error")
				}
				hooked = append(hooked, link)
			})
			v, decided, err := c.Classify(context.Background(), &Failure{Status: 429})
			if err != nil || !decided {
				t.Fatalf("Classify = decided %v, err %v; want decided, nil", decided, err)
			}
			if v.Class != tt.wantClass || v.By != tt.wantBy {
				t.Errorf("verdict = %s by %q, want %s by %q", v.Class, v.By, tt.wantClass, tt.wantBy)
			}
			if got := c.Errors(); !reflect.DeepEqual(got, tt.wantErrs) {
				t.Errorf("Errors() = %v, want %v", got, tt.wantErrs)
			}
			if !reflect.DeepEqual(hooked, tt.wantHook) {
				t.Errorf("hook saw %v, want %v", hooked, tt.wantHook)
			}
		})
	}
}

func TestChainStopsAtFirstDecision(t *testing.T) {
	a, b := decides("a", ClassRateLimit), decides("b", ClassQuota)
	c := NewChain(a, b)
	c.Classify(context.Background(), &Failure{})
	if a.calls != 1 || b.calls != 0 {
		t.Errorf("calls a=%d b=%d, want 1 and 0", a.calls, b.calls)
	}
}

func TestChainZeroValue(t *testing.T) {
	var c Chain
	v, decided, err := c.Classify(context.Background(), &Failure{})
	if err != nil || !decided || v.Class != ClassUnknown || v.By != ByChainNone {
		t.Errorf("zero chain = %+v %v %v", v, decided, err)
	}
	if ans, v := c.Explain(context.Background(), &Failure{}); len(ans) != 0 || v.Class != ClassUnknown {
		t.Errorf("zero chain Explain = %v %+v", ans, v)
	}
}

func TestChainCanceledContext(t *testing.T) {
	a := decides("a", ClassRateLimit)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, decided, err := NewChain(a).Classify(ctx, &Failure{})
	if !errors.Is(err, context.Canceled) || !decided || v.Class != ClassUnknown {
		t.Errorf("Classify(canceled) = %+v %v %v", v, decided, err)
	}
	if a.calls != 0 {
		t.Errorf("a link was asked after cancellation")
	}
}

func TestChainExplain(t *testing.T) {
	hooked := 0
	c := NewChain(
		abstains("user"),
		fails("plugin"),
		explainingClassifier{&fakeClassifier{name: "rules", v: Verdict{Class: ClassQuota, By: "rules/q"}, decided: true, detail: []string{"q", "r"}}},
		decides("builtin", ClassRateLimit),
	).WithErrorHook(func(string, error) { hooked++ })
	answers, v := c.Explain(context.Background(), &Failure{Status: 429})
	if v.Class != ClassQuota || v.By != "rules/q" {
		t.Errorf("final = %+v, want QUOTA by rules/q", v)
	}
	want := []struct {
		link    string
		decided bool
		wins    bool
		err     bool
		detail  int
	}{
		{"user", false, false, false, 0},
		{"plugin", false, false, true, 0},
		{"rules", true, true, false, 2},
		{"builtin", true, false, false, 0},
	}
	if len(answers) != len(want) {
		t.Fatalf("got %d answers, want %d", len(answers), len(want))
	}
	for i, w := range want {
		a := answers[i]
		if a.Link != w.link || a.Decided != w.decided || a.Wins != w.wins || (a.Err != "") != w.err || len(a.Detail) != w.detail {
			t.Errorf("answer %d = %+v, want %+v", i, a, w)
		}
		if a.Decided != (a.Verdict != nil) {
			t.Errorf("answer %d: Decided %v but Verdict %v", i, a.Decided, a.Verdict)
		}
	}
	if hooked != 0 {
		t.Errorf("Explain called the error hook %d times", hooked)
	}
	if n := c.Errors()["plugin"]; n != 0 {
		t.Errorf("Explain counted %d errors", n)
	}
	// Classify on the same chain agrees with Explain.
	if cv, _, _ := c.Classify(context.Background(), &Failure{Status: 429}); cv != v {
		t.Errorf("Classify = %+v, Explain = %+v", cv, v)
	}
}

func TestChainConcurrent(t *testing.T) {
	c := NewChain(fails("a"), decides("b", ClassOverloaded))
	var wg sync.WaitGroup
	const P, N = 8, 200
	start := make(chan struct{})
	for p := 0; p < P; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < N; i++ {
				if v, _, _ := c.Classify(context.Background(), &Failure{}); v.Class != ClassOverloaded {
					t.Errorf("got %s", v.Class)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := c.Errors()["a"]; n != P*N {
		t.Errorf("errors = %d, want %d", n, P*N)
	}
}

func TestChainVerdictHook(t *testing.T) {
	var got []string
	hook := func(f *Failure, v Verdict) { got = append(got, fmt.Sprintf("%d %s %s", f.Status, v.Class, v.By)) }
	c := NewChain(decides("a", ClassRateLimit)).WithVerdictHook(hook)
	c.Classify(context.Background(), &Failure{Status: 429})
	c.Explain(context.Background(), &Failure{Status: 429}) // never observed
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Classify(ctx, &Failure{Status: 429}) // interrupted: not observed
	NewChain().WithVerdictHook(hook).Classify(context.Background(), &Failure{Status: 500})
	want := []string{"429 RATE_LIMIT " + decides("a", ClassRateLimit).v.By, "500 UNKNOWN chain/none"}
	if !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}
