package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// The three Octafuse builds answer the same golden cases through the host.
func TestOctafuseExamples(t *testing.T) {
	for _, name := range []string{"octafuse-wat.wasm", "octafuse-as.wasm", "octafuse-go.wasm"} {
		t.Run(name, func(t *testing.T) {
			th := newTestHost(t, "")
			c, err := NewClassifier(context.Background(), th.Host, modulePath(t, name), ClassifierOptions{Cases: octafuseCases(t), Limits: Limits{Timeout: slow}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Name() != "wasm/"+name {
				t.Errorf("Name() = %q", c.Name())
			}
			v, decided, err := c.Classify(context.Background(), failureWithBody(200, `{"code":"OCTA_THROTTLED","wait_ms":1500}`))
			want := engine.Verdict{Class: engine.ClassRateLimit, RetryAfterMs: ms(1500), By: "wasm/" + name}
			if err != nil || !decided || !reflect.DeepEqual(v, want) {
				t.Errorf("Classify = %+v (hint %s), %v, %v; want %+v", v, hint(v), decided, err, want)
			}
			_, decided, err = c.Classify(context.Background(), failureWithBody(429, `{"error":"slow down"}`))
			if err != nil || decided {
				t.Errorf("someone else's failure: decided=%v err=%v, want an abstention", decided, err)
			}
			st := c.Plugin().Stats()
			if st.Failures != 0 || st.Calls < 9 || st.Abstains < 3 || st.Made != 1 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// A failing golden case refuses the classifier, naming the case.
func TestGoldenCaseFails(t *testing.T) {
	th := newTestHost(t, "")
	cases := []map[string]any{
		{"name": "wrong", "input": map[string]any{"status": 200, "body": `{"code":"OCTA_BUSY"}`}, "expect": map[string]any{"class": "QUOTA"}},
		{"name": "hint", "input": map[string]any{"status": 200, "body": `{"code":"OCTA_BUSY","wait_ms":5}`}, "class": "OVERLOADED", "retryAfterMs": 6},
		{"input": map[string]any{"status": 200}, "expect": map[string]any{"class": "AUTH"}},
		{"input": map[string]any{"status": 200, "bogus": 1}, "class": "AUTH"},
	}
	_, err := NewClassifier(context.Background(), th.Host, modulePath(t, "octafuse-wat.wasm"), ClassifierOptions{Cases: cases, Limits: Limits{Timeout: slow}})
	if !errors.Is(err, ErrCaseFailed) {
		t.Fatalf("err = %v, want ErrCaseFailed", err)
	}
	for _, want := range []string{
		"cases[0] (wrong): golden case failed: got OVERLOADED by wasm/octafuse-wat.wasm, want QUOTA",
		"cases[1] (hint): golden case failed: got retryAfterMs 5 by wasm/octafuse-wat.wasm, want 6",
		"cases[2]: golden case failed: the module abstained, want AUTH",
		`cases[3]: input: unknown key "bogus"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if st := th.Stats(); st.Plugins != 0 || st.Modules != 0 {
		t.Errorf("refused classifier left %+v", st)
	}
}

// The module's "by" is appended to the plugin's name; the config reaches
// gate_init; _initialize runs once per instance.
func TestConfigInitAndBy(t *testing.T) {
	th := newTestHost(t, "")
	p, err := th.LoadBytes(context.Background(), testModule(t, "config.wasm"), Options{
		Kind: KindClassify, Name: "cfg",
		Config: map[string]any{"class": "AUTH", "by": "from-config", "window": "day", "retryAfterMs": 12},
		Limits: Limits{MaxInstances: 3, Timeout: slow},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := ClassifierFor(p)
	v, decided, err := c.Classify(context.Background(), failureWithBody(401, "nope"))
	want := engine.Verdict{Class: engine.ClassAuth, RetryAfterMs: ms(12), Window: "day", By: "wasm/cfg/from-config"}
	if err != nil || !decided || !reflect.DeepEqual(v, want) {
		t.Fatalf("Classify = %+v, %v, %v; want %+v", v, decided, err, want)
	}
	// Concurrent calls make more instances; each ran _initialize exactly once.
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				v, _, err := c.Classify(context.Background(), failureWithBody(401, "count"))
				if err != nil || v.RetryAfterMs == nil || *v.RetryAfterMs != 1 {
					t.Errorf("count: %+v, %v", v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := p.Stats(); st.Made < 1 || st.Made > 3 || st.Failures != 0 {
		t.Errorf("stats = %+v, want 1..3 instances made", st)
	}
}

// Hostile and broken modules fail the call, never the host; the chain falls
// through to the next link.
func TestFailingCallsFallThrough(t *testing.T) {
	next := staticClassifier{engine.Verdict{Class: engine.ClassServer, By: "next/rule"}}
	for _, tc := range []struct {
		module string
		limits Limits
		want   error
		msg    string
	}{
		{"trap.wasm", Limits{}, ErrTrap, "unreachable"},
		{"loop.wasm", Limits{Timeout: 2 * time.Millisecond}, ErrTimeout, "stopped after 2ms"},
		{"bomb.wasm", Limits{MemoryPages: 64}, ErrTrap, "unreachable"},
		{"garbage.wasm", Limits{}, ErrOutput, "output is not JSON (16 bytes"},
		{"nooutput.wasm", Limits{}, ErrOutput, "returned 0 without calling output_write"},
		{"errcode.wasm", Limits{}, ErrCode, "returned 7"},
		{"switch.wasm", Limits{MaxOutputBytes: 16}, ErrOutput, "output of 42 bytes exceeds the limit of 16"},
	} {
		t.Run(tc.module, func(t *testing.T) {
			th := newTestHost(t, "")
			c := th.classifier(t, tc.module, tc.limits)
			_, decided, err := c.Classify(context.Background(), failureWithBody(500, "x"))
			if decided || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Classify: decided=%v err=%v; want %v containing %q", decided, err, tc.want, tc.msg)
			}
			st := c.Plugin().Stats()
			if st.Calls != 1 || st.Failures != 1 || st.Discarded != 1 || st.Instances != 0 {
				t.Errorf("stats = %+v; want the instance discarded", st)
			}
			chain := engine.NewChain(c, next)
			v, _, _ := chain.Classify(context.Background(), failureWithBody(500, "x"))
			if v.By != "next/rule" || chain.Errors()[c.Name()] != 1 {
				t.Errorf("chain = %+v, errors %v; want the next link to decide", v, chain.Errors())
			}
		})
	}
}

// After a trap, a timeout or a memory bomb the plugin serves the next request
// from a fresh instance.
func TestRecoversAfterHostileCall(t *testing.T) {
	th := newTestHost(t, "")
	// A deadline of a second: the memory bomb must trap on the page cap, not hit
	// the deadline, even on a loaded machine under -race (50 ms was not enough).
	c := th.classifier(t, "switch.wasm", Limits{MemoryPages: 64, Timeout: time.Second})
	ok := failureWithBody(500, "fine")
	for _, bad := range []struct {
		body string
		want error
	}{{"trap", ErrTrap}, {"loop", ErrTimeout}, {"bomb", ErrTrap}} {
		start := time.Now()
		_, _, err := c.Classify(context.Background(), failureWithBody(500, bad.body))
		if !errors.Is(err, bad.want) {
			t.Fatalf("%s: err = %v, want %v", bad.body, err, bad.want)
		}
		if bad.want == ErrTimeout {
			t.Logf("loop returned after %s (deadline 1s)", time.Since(start))
		}
		v, decided, err := c.Classify(context.Background(), ok)
		if err != nil || !decided || v.Class != engine.ClassRateLimit || *v.RetryAfterMs != 1000 {
			t.Fatalf("after %s: %+v, %v, %v", bad.body, v, decided, err)
		}
	}
	st := c.Plugin().Stats()
	if st.Traps != 2 || st.Timeouts != 1 || st.Discarded != 3 || st.Made != 4 || st.Failures != 3 {
		t.Errorf("stats = %+v", st)
	}
	if !strings.Contains(th.log.String(), "plugin says: plugin=switch.wasm msg=\"switch called\"") {
		t.Errorf("gate.log line missing from the log:\n%s", th.log.String())
	}
}

// An instance whose memory grew past RetainPages is dropped after its call.
func TestRetainPages(t *testing.T) {
	th := newTestHost(t, "")
	c := th.classifier(t, "switch.wasm", Limits{MemoryPages: 128, RetainPages: 16})
	v, decided, err := c.Classify(context.Background(), failureWithBody(500, "swell"))
	if err != nil || !decided || v.Class != engine.ClassRateLimit {
		t.Fatalf("swell: %+v, %v, %v", v, decided, err)
	}
	if st := c.Plugin().Stats(); st.Discarded != 1 || st.Instances != 0 || st.Failures != 0 {
		t.Errorf("stats = %+v; want the swollen instance discarded, no failure", st)
	}
	init1 := c.Plugin().Stats().InitTime
	if _, _, err := c.Classify(context.Background(), failureWithBody(500, "fine")); err != nil {
		t.Fatal(err)
	}
	// The call after the discard made the instance it ran on: its time shows.
	if st := c.Plugin().Stats(); st.Instances != 1 || st.Made != 2 || st.InitTime <= init1 {
		t.Errorf("stats = %+v", st)
	}
}

// Modules importing anything outside the gate/v1 list are refused before
// instantiation, each import named.
func TestForbiddenImports(t *testing.T) {
	th := newTestHost(t, "")
	_, err := th.LoadBytes(context.Background(), testModule(t, "forbidden.wasm"), Options{Kind: KindClassify, Name: "forbidden.wasm"})
	var ie *ImportError
	if !errors.Is(err, ErrImport) || !errors.As(err, &ie) {
		t.Fatalf("err = %v, want an ImportError", err)
	}
	if !reflect.DeepEqual(ie.Imports, []string{"env.open_socket"}) {
		t.Errorf("Imports = %v", ie.Imports)
	}
	want := `wasm: forbidden.wasm: import "env.open_socket" is not allowed (allowed: gate.input_read, gate.output_write, gate.log, wasi_snapshot_preview1.*)`
	if err.Error() != want {
		t.Errorf("err =\n%v\nwant\n%s", err, want)
	}

	_, err = th.LoadBytes(context.Background(), testModule(t, "badgate.wasm"), Options{Kind: KindClassify, Name: "badgate.wasm"})
	for _, w := range []string{`import "gate.fetch" is not allowed`, `import "gate.output_write" has signature (i32), want (i32,i32)->i32`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("badgate: err = %v, want %q", err, w)
		}
	}
	if st := th.Stats(); st.Modules != 0 || st.Plugins != 0 {
		t.Errorf("refused modules left %+v", st)
	}
}

// The ABI is checked: marker, entry point and signatures, the kind asked for,
// and a gate_init that refuses.
func TestABIChecks(t *testing.T) {
	th := newTestHost(t, "")
	for _, tc := range []struct {
		module string
		kind   Kind
		want   error
		msgs   []string
	}{
		{"nomarker.wasm", KindClassify, ErrABI, []string{"does not export the gate_abi_v1 marker", "exports gate_classify with signature (i32,i32)->i32, want (i32)->i32"}},
		{"trap.wasm", KindScore, ErrABI, []string{"does not export gate_score(i32)->i32"}},
		{"initfail.wasm", KindClassify, ErrInit, []string{"gate_init: returned 3"}},
	} {
		_, err := th.LoadBytes(context.Background(), testModule(t, tc.module), Options{Kind: tc.kind, Name: tc.module})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.module, err, tc.want)
			continue
		}
		for _, m := range tc.msgs {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: err = %v, want %q", tc.module, err, m)
			}
		}
	}
	if _, err := th.LoadBytes(context.Background(), []byte("not wasm"), Options{Kind: KindClassify}); !errors.Is(err, ErrABI) {
		t.Errorf("garbage bytes: err = %v", err)
	}
	if _, err := th.LoadBytes(context.Background(), testModule(t, "trap.wasm"), Options{Kind: "filter"}); err == nil || !strings.Contains(err.Error(), `unknown kind "filter"`) {
		t.Errorf("bad kind: err = %v", err)
	}
	if _, err := th.LoadBytes(context.Background(), testModule(t, "trap.wasm"), Options{Kind: KindClassify, Limits: Limits{Timeout: -1}}); err == nil || !strings.Contains(err.Error(), "limits.timeout: must not be negative") {
		t.Errorf("bad limits: err = %v", err)
	}
}

// WASI is there, sandboxed: no environment, no arguments, stdout to the host's
// writer only.
func TestWASISandbox(t *testing.T) {
	th := newTestHost(t, "")
	c := th.classifier(t, "wasi.wasm", Limits{})
	v, decided, err := c.Classify(context.Background(), failureWithBody(500, ""))
	if err != nil || !decided || v.RetryAfterMs == nil || *v.RetryAfterMs != 0 {
		t.Fatalf("Classify = %+v, %v, %v; want retryAfterMs 0 (no env, no args)", v, decided, err)
	}
	if !strings.Contains(th.out.String(), "hello from wasi") {
		t.Errorf("stdout = %q", th.out.String())
	}
}

// A plugin failing MaxFailures times in a row is quarantined: not called until
// the quarantine ends, logged once; after it one more failure re-quarantines.
func TestQuarantine(t *testing.T) {
	th := newTestHost(t, "")
	c := th.classifier(t, "switch.wasm", Limits{MaxFailures: 3, Quarantine: 30 * time.Second})
	trap, fine := failureWithBody(500, "trap"), failureWithBody(500, "fine")
	ctx := context.Background()

	steps := []struct {
		advance time.Duration
		f       *engine.Failure
		want    error // nil: decided
	}{
		{0, trap, ErrTrap},
		{0, fine, nil}, // a success clears the streak
		{0, trap, ErrTrap},
		{0, trap, ErrTrap},
		{0, trap, ErrTrap}, // third in a row: quarantined
		{0, fine, ErrQuarantined},
		{29 * time.Second, fine, ErrQuarantined},
		{time.Second, fine, nil}, // over; the success clears it
		{0, trap, ErrTrap},
		{0, trap, ErrTrap},
		{0, trap, ErrTrap},                // quarantined again
		{30 * time.Second, trap, ErrTrap}, // over, and one failure re-quarantines
		{0, fine, ErrQuarantined},
	}
	for i, s := range steps {
		th.clock.Advance(s.advance)
		_, decided, err := c.Classify(ctx, s.f)
		switch {
		case s.want == nil && (err != nil || !decided):
			t.Fatalf("step %d: decided=%v err=%v, want a verdict", i, decided, err)
		case s.want != nil && !errors.Is(err, s.want):
			t.Fatalf("step %d: err = %v, want %v", i, err, s.want)
		}
	}
	st := c.Plugin().Stats()
	if st.Quarantines != 3 || !st.Quarantined || st.Skipped != 3 || st.Calls != 10 || st.Failures != 8 {
		t.Errorf("stats = %+v", st)
	}
	if !st.QuarantinedUntil.Equal(th.clock.Now().Add(30 * time.Second)) {
		t.Errorf("QuarantinedUntil = %s", st.QuarantinedUntil)
	}
	if n := strings.Count(th.log.String(), "plugin quarantined"); n != 3 {
		t.Errorf("logged %d quarantines, want 3 (once each):\n%s", n, th.log.String())
	}
}

// Same bytes load once: a second load (a reload) is a handle on the same plugin,
// compiled once, with its warm instances; the plugin goes with its last handle.
func TestHotSwapBySHA256(t *testing.T) {
	th := newTestHost(t, t.TempDir())
	ctx := context.Background()
	bin := testModule(t, "octafuse-wat.wasm")
	p1, err := th.LoadBytes(ctx, bin, Options{Kind: KindClassify, Name: "octa.wasm", Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	c1 := ClassifierFor(p1)
	if _, _, err := c1.Classify(ctx, failureWithBody(200, "OCTA_BUSY")); err != nil {
		t.Fatal(err)
	}
	p2, err := th.LoadBytes(ctx, append([]byte(nil), bin...), Options{Kind: KindClassify, Name: "octa.wasm", Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	if p1.s != p2.s || p2.SHA256() != p1.SHA256() {
		t.Fatal("same bytes gave a different plugin")
	}
	if st := th.Stats(); st.Compiles != 1 || st.Modules != 1 || st.Plugins != 1 {
		t.Errorf("host stats = %+v, want one compile", st)
	}
	// The old snapshot lets go; a request that still holds its classifier is
	// served by the same pool.
	p1.Close()
	p1.Close()
	if _, _, err := c1.Classify(ctx, failureWithBody(200, "OCTA_BUSY")); err != nil {
		t.Errorf("old handle after close: %v", err)
	}
	if st := p2.Stats(); st.Made != 1 || st.Calls != 2 {
		t.Errorf("plugin stats = %+v, want the warm instance reused", st)
	}
	// Other bytes (another module) compile anew; the same bytes under another
	// name or config share the compiled form but not the pool.
	p3, err := th.LoadBytes(ctx, bin, Options{Kind: KindClassify, Name: "octa2.wasm", Limits: Limits{Timeout: slow}})
	if err != nil {
		t.Fatal(err)
	}
	if p3.s == p2.s || p3.s.mod != p2.s.mod {
		t.Error("another name should share the compiled module, not the plugin")
	}
	p4 := th.load(t, "switch.wasm", KindClassify, Limits{})
	if st := th.Stats(); st.Compiles != 2 || st.Modules != 2 || st.Plugins != 3 {
		t.Errorf("host stats = %+v", st)
	}
	p2.Close()
	p3.Close()
	p4.Close()
	if st := th.Stats(); st.Modules != 0 || st.Plugins != 0 {
		t.Errorf("after closing every handle: %+v", st)
	}
	if _, _, err := c1.Classify(ctx, failureWithBody(200, "OCTA_BUSY")); !errors.Is(err, ErrClosed) {
		t.Errorf("call on a plugin gone: %v, want ErrClosed", err)
	}
}

// Reloads during concurrent classification lose no call and leak nothing.
func TestReloadHammer(t *testing.T) {
	th := newTestHost(t, "")
	ctx := context.Background()
	bin := testModule(t, "octafuse-wat.wasm")
	load := func() *Classifier {
		p, err := th.LoadBytes(ctx, bin, Options{Kind: KindClassify, Name: "octa.wasm", Limits: Limits{Timeout: slow}})
		if err != nil {
			t.Fatal(err)
		}
		return ClassifierFor(p)
	}
	var cur struct {
		sync.RWMutex
		c *Classifier
	}
	cur.c = load()
	reloads := 1000
	if testing.Short() {
		reloads = 100
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var calls, fails sync.Map
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, bad := 0, 0
			for {
				select {
				case <-done:
					calls.Store(g, n)
					fails.Store(g, bad)
					return
				default:
				}
				cur.RLock()
				c := cur.c
				cur.RUnlock()
				v, decided, err := c.Classify(ctx, failureWithBody(200, `{"code":"OCTA_THROTTLED","wait_ms":9}`))
				n++
				if err != nil || !decided || *v.RetryAfterMs != 9 {
					bad++
				}
			}
		}()
	}
	for range reloads {
		next := load()
		cur.Lock()
		old := cur.c
		cur.c = next
		cur.Unlock()
		old.Close()
	}
	close(done)
	wg.Wait()
	total, lost := 0, 0
	for g := range 4 {
		n, _ := calls.Load(g)
		b, _ := fails.Load(g)
		total += n.(int)
		lost += b.(int)
	}
	if lost != 0 {
		t.Errorf("%d of %d calls failed during %d reloads", lost, total, reloads)
	}
	if st := th.Stats(); st.Compiles != 1 || st.Plugins != 1 || st.Modules != 1 {
		t.Errorf("host stats = %+v", st)
	}
	cur.c.Close()
	if st := th.Stats(); st.Plugins != 0 || st.Modules != 0 {
		t.Errorf("leaked: %+v", st)
	}
	t.Logf("%d calls during %d reloads", total, reloads)
}

// The pool never holds more than MaxInstances, and concurrent calls all succeed.
func TestPoolBounded(t *testing.T) {
	th := newTestHost(t, "")
	c := th.classifier(t, "octafuse-wat.wasm", Limits{MaxInstances: 2})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if _, decided, err := c.Classify(context.Background(), failureWithBody(200, "OCTA_CREDITS")); err != nil || !decided {
					t.Errorf("Classify: %v %v", decided, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := c.Plugin().Stats(); st.Made > 2 || st.Calls != 1600 || st.Failures != 0 {
		t.Errorf("stats = %+v, want at most 2 instances", st)
	}
}

// The host's input is the failure's JSON, body cut to MaxBodyBytes at a UTF-8
// boundary; an input past MaxInputBytes is refused without blaming the module.
func TestInputEncoding(t *testing.T) {
	since := int64(1234)
	for _, f := range []*engine.Failure{
		{},
		{Status: 429, Headers: map[string]string{"Retry-After": "20", "x-q\"uote": "a\\b\n\t\x01"}, Body: `{"error":"slow"}`, Provider: "p", Model: "m", ErrorKind: "timeout", SinceCapacityMs: &since},
		{Status: 400, Body: "bad \xff utf8 \u2028 line sep <tag> & ☃"},
	} {
		got := appendFailure(nil, f, 1<<20)
		var back engine.Failure
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		want, _ := json.Marshal(f)
		var wantBack engine.Failure
		json.Unmarshal(want, &wantBack)
		if !reflect.DeepEqual(back, wantBack) {
			t.Errorf("round trip:\n got %+v\nwant %+v", back, wantBack)
		}
	}
	body := strings.Repeat("é", 10000) // 20000 bytes
	got := appendFailure(nil, &engine.Failure{Status: 200, Body: body}, 16<<10)
	var back engine.Failure
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Body) != 16<<10 || !strings.HasPrefix(body, back.Body) {
		t.Errorf("truncated body has %d bytes", len(back.Body))
	}
	if s := truncateUTF8("aé", 2); s != "a" {
		t.Errorf("truncateUTF8 split a character: %q", s)
	}

	th := newTestHost(t, "")
	c := th.classifier(t, "switch.wasm", Limits{MaxInputBytes: 100, MaxBodyBytes: 1000})
	_, _, err := c.Classify(context.Background(), failureWithBody(200, strings.Repeat("x", 200)))
	if !errors.Is(err, ErrInput) {
		t.Errorf("err = %v, want ErrInput", err)
	}
	if st := c.Plugin().Stats(); st.Calls != 0 || st.Failures != 0 {
		t.Errorf("stats = %+v: the module was blamed", st)
	}
}

// The caller's own cancellation is not the module's failure.
func TestCallerCancel(t *testing.T) {
	th := newTestHost(t, "")
	c := th.classifier(t, "loop.wasm", Limits{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, _, err := c.Classify(ctx, failureWithBody(500, ""))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
	if st := c.Plugin().Stats(); st.Failures != 0 || st.Discarded != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func ExampleClassifier() {
	ctx := context.Background()
	// A daemon passes CacheDir(cfg.StateDir) to keep compiled code across restarts.
	host, err := NewHost(HostOptions{})
	if err != nil {
		panic(err)
	}
	defer host.Close(ctx)
	// Limits left out take the production defaults (2 ms a call); a test run
	// under the race detector can be slower than that, so this one allows 1 s.
	c, err := NewClassifier(ctx, host, "../testdata/plugins/octafuse-wat.wasm", ClassifierOptions{Name: "octafuse.wasm", Limits: Limits{Timeout: time.Second}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	v, decided, err := c.Classify(ctx, &engine.Failure{Status: 200, Body: `{"code":"OCTA_THROTTLED","wait_ms":1500}`})
	fmt.Println(v.Class, *v.RetryAfterMs, v.By, decided, err)
	// Output: RATE_LIMIT 1500 wasm/octafuse.wasm true <nil>
}

// The fast output parser agrees with encoding/json wherever it answers.
func TestParseVerdictFastPath(t *testing.T) {
	c := &Classifier{name: "wasm/x"}
	for _, out := range []string{
		`{"class":"RATE_LIMIT","retryAfterMs":1500}`,
		` { "class" : "quota" , "retryAfterMs" : null , "window":"day", "by":"r1", "extra": true, "n": -1.5e3 } `,
		`{"class":"AUTH","retryAfterMs":12.9}`,
		`{"class":"AUTH","retryAfterMs":"12"}`,
		`{"Class":"AUTH"}`,
		`{"class":"AUTH","nested":{"a":1}}`,
		`{"class":"AUTH\u0021"}`,
		`{"class":"AUTH","retryAfterMs":-1}`,
		`{"class":"NOPE"}`,
		`{"class":"AUTH"} x`,
		`{"class":"AUTH",}`,
		`{}`,
		`[]`,
		`{"class":"AUTH","by":null,"window":null}`,
		`{"class":"AUTH","retryAfterMs":1,"retryAfterMs":null}`,
		`{"class":"AUTH","retryAfterMs":01}`,
		`{"class":"AUTH","retryAfterMs":-01}`,
		`{"class":"AUTH","retryAfterMs":1.}`,
		`{"class":"AUTH","retryAfterMs":1.e3}`,
		`{"class":"AUTH","retryAfterMs":1e}`,
		`{"class":"AUTH","retryAfterMs":0.5e-1}`,
		`{"class":"AUTH","retryAfterMs":0}`,
		`{"class":"AUTH","n":00}`,
	} {
		got, gotErr := c.parseVerdict([]byte(out))
		var o verdictOut
		want, wantErr := engine.Verdict{}, error(nil)
		if err := json.Unmarshal([]byte(out), &o); err != nil {
			wantErr = err
		} else {
			// Run the slow path alone: a copy of parseVerdict's tail.
			want, wantErr = c.verdictFrom(o)
		}
		if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: fast %+v, %v; encoding/json %+v, %v", out, got, gotErr, want, wantErr)
		}
	}
}

// parseFlat refuses what JSON refuses: a number with a leading zero, a bare
// dot or a bare exponent, in a wanted member or not.
func TestParseFlatNumbers(t *testing.T) {
	keys := []string{"retryAfterMs"}
	for in, wantOK := range map[string]bool{
		`{"retryAfterMs":1500}`:    true,
		`{"retryAfterMs":0}`:       true,
		`{"retryAfterMs":-0.5e+3}`: true,
		`{"retryAfterMs":10}`:      true,
		`{"retryAfterMs":01}`:      false,
		`{"retryAfterMs":-01}`:     false,
		`{"retryAfterMs":00}`:      false,
		`{"retryAfterMs":1.}`:      false,
		`{"retryAfterMs":1.e3}`:    false,
		`{"retryAfterMs":1e}`:      false,
		`{"retryAfterMs":1e+}`:     false,
		`{"retryAfterMs":-}`:       false,
		`{"retryAfterMs":1-2}`:     false,
		`{"other":01}`:             false,
	} {
		got := parseFlat([]byte(in), keys, func(string, string, float64, byte) {})
		if got != wantOK {
			t.Errorf("parseFlat(%s) = %v, want %v", in, got, wantOK)
		}
		if valid := json.Valid([]byte(in)); valid != wantOK {
			t.Errorf("test table: json.Valid(%s) = %v", in, valid)
		}
	}
}

// Plugin cases read failures as rule files' cases do (internal/failurejson):
// the status range is checked, and the rule files' forms are accepted.
func TestGoldenCaseForms(t *testing.T) {
	th := newTestHost(t, "")
	load := func(cases []map[string]any) error {
		c, err := NewClassifier(context.Background(), th.Host, modulePath(t, "octafuse-wat.wasm"), ClassifierOptions{Cases: cases, Limits: Limits{Timeout: slow}})
		if err == nil {
			c.Close()
		}
		return err
	}
	// Plugin cases used to take any status.
	for _, tc := range []struct {
		status any
		want   string
	}{
		{4290, `cases[0]: input: status: want an HTTP status (100 to 599), or 0 or null for no HTTP answer (got 4290)`},
		{42, `input: status: want an HTTP status`},
		{-1, `input: status: want an HTTP status`},
	} {
		err := load([]map[string]any{{"input": map[string]any{"status": tc.status}, "expect": map[string]any{"abstain": true}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrCaseFailed) {
			t.Errorf("status %v: err = %v, want %q", tc.status, err, tc.want)
		}
	}
	// A header value of an object used to become its Go print form.
	err := load([]map[string]any{{"input": map[string]any{"status": 429, "headers": map[string]any{"x": map[string]any{"a": 1}}}, "abstain": true}})
	if err == nil || !strings.Contains(err.Error(), `input: headers["x"]: want a string, a number or a list of them`) {
		t.Errorf("header of an object: err = %v", err)
	}
	// The rule files' forms: the failure inline, expect as just the class; a
	// header list; status 0 for no HTTP answer.
	if err := load([]map[string]any{
		{"status": 200, "body": `{"code":"OCTA_BUSY","wait_ms":250}`, "expect": "OVERLOADED", "retryAfterMs": 250},
		{"input": map[string]any{"status": 429, "headers": map[string]any{"retry-after": []any{"20", 30}}}, "abstain": true},
		{"input": map[string]any{"status": 0, "errorKind": "reset"}, "expect": map[string]any{"abstain": true}},
	}); err != nil {
		t.Errorf("rule files' forms: %v", err)
	}
}
