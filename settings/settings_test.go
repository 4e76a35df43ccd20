package settings

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/gatectl/gatectl/state"
)

const fileYAML = `
providers:
  p: {kind: openai, baseURL: "http://127.0.0.1:9/v1"}
gate:
  window: 60s
  maxWait: 120s
  models:
    p/a: {tpm: 1000}
retry:
  rounds: 3
`

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func parse(t *testing.T, y string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(y), "gatectl.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func open(t *testing.T, dir string) (*Book, *state.Store) {
	t.Helper()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := Open(st, func() time.Time { return t0 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, st
}

func noop() error { return nil }

// A failed apply leaves nothing behind: not in memory, not on disk.
func TestSetRollsBackWhenApplyFails(t *testing.T) {
	dir := t.TempDir()
	b, st := open(t, dir)
	file := parse(t, fileYAML)
	if _, err := b.Set(file, "retry", map[string]any{"rounds": 5}, noop); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("rebuild failed")
	calls := 0
	_, err := b.Set(file, "retry", map[string]any{"rounds": 7}, func() error {
		calls++
		if calls == 1 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 2 {
		t.Fatalf("err %v after %d applies (want the failure, then the old settings applied again)", err, calls)
	}
	if got := b.Overrides("retry")["rounds"]; got == nil || got.(interface{ String() string }).String() != "5" {
		t.Fatalf("in memory: %v", b.Overrides("retry"))
	}
	recs, _ := st.LoadSettings()
	if !strings.Contains(string(recs["retry"]), `"value":5`) {
		t.Fatalf("on disk: %s", recs["retry"])
	}
	cfg, _ := b.Apply(file)
	if cfg.Retry.Rounds != 5 {
		t.Fatalf("applied rounds %d", cfg.Retry.Rounds)
	}
}

// A model set alone keeps the file's other models; a model the file lacks is
// kept until the file names it with another value.
func TestModelsMergeAndFileWins(t *testing.T) {
	b, _ := open(t, t.TempDir())
	file := parse(t, fileYAML)
	if _, err := b.Set(file, "gate", map[string]any{"models": map[string]any{"p/b": map[string]any{"tpm": 2000}}}, noop); err != nil {
		t.Fatal(err)
	}
	cfg, _ := b.Apply(file)
	if cfg.Gate.Models["p/a"].TPM != 1000 || cfg.Gate.Models["p/b"].TPM != 2000 {
		t.Fatalf("models %+v", cfg.Gate.Models)
	}
	if file.Gate.Models["p/b"].TPM != 0 {
		t.Fatal("the file's config changed")
	}
	// the file now lists p/b itself: its value wins
	file2 := parse(t, strings.Replace(fileYAML, "p/a: {tpm: 1000}", "p/a: {tpm: 1000}\n    p/b: {tpm: 3000}", 1))
	if cfg, _ := b.Apply(file2); cfg.Gate.Models["p/b"].TPM != 3000 {
		t.Fatalf("the file lost: %+v", cfg.Gate.Models)
	}
	if d := b.Reconcile(file2); len(d) != 1 || strings.Join(d[0].Key, ".") != "models.p/b" {
		t.Fatalf("dropped %+v", d)
	}
	if !b.Empty() {
		t.Fatal("the override stayed")
	}
}

// Overrides that no longer fit the file (maxWait below a window the file
// raised) are dropped, not a reload refused.
func TestSectionThatNoLongerFits(t *testing.T) {
	b, _ := open(t, t.TempDir())
	file := parse(t, fileYAML)
	if _, err := b.Set(file, "gate", map[string]any{"maxWait": "90s"}, noop); err != nil {
		t.Fatal(err)
	}
	file2 := parse(t, strings.Replace(strings.Replace(fileYAML, "window: 60s", "window: 100s", 1), "maxWait: 120s", "maxWait: 200s", 1))
	// maxWait's file value changed too: dropped for that reason
	if d := b.Reconcile(file2); len(d) != 1 || d[0].Reason != "the file changed this key" {
		t.Fatalf("dropped %+v", d)
	}
	b.Reconcile(file) // the file back as it was
	if _, err := b.Set(file, "gate", map[string]any{"maxWait": "90s"}, noop); err != nil {
		t.Fatal(err)
	}
	file3 := parse(t, strings.Replace(fileYAML, "window: 60s", "window: 110s", 1))
	cfg, _ := b.Apply(file3)
	if cfg.Gate.MaxWait != 120*time.Second {
		t.Fatalf("maxWait %s", cfg.Gate.MaxWait)
	}
	// the reason is the file's message without a line: the object set at runtime has none
	if d := b.Reconcile(file3); len(d) != 1 || !strings.Contains(d[0].Reason, "no longer fit the file: gate.maxWait: must be at least") {
		t.Fatalf("dropped %+v", d)
	}
}

// A damaged record is skipped, the others load.
func TestDamagedRecord(t *testing.T) {
	dir := t.TempDir()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.SaveSettings("retry", []byte("{not json"))
	st.SaveSettings("quota", []byte(`{"overrides":[{"key":["longTermDelay"],"value":"10m","file":"1h0m0s","setAt":"2026-03-01T12:00:00Z"}]}`))
	st.Close()
	b, _ := open(t, dir)
	if b.Overrides("retry")["rounds"] != nil || b.Overrides("quota")["longTermDelay"] != "10m" {
		t.Fatalf("retry %v quota %v", b.Overrides("retry"), b.Overrides("quota"))
	}
}

// Sets and reconciles from many goroutines, under -race.
func TestConcurrentUse(t *testing.T) {
	b, _ := open(t, t.TempDir())
	file := parse(t, fileYAML)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if _, err := b.Set(file, "retry", map[string]any{"rounds": i + j}, noop); err != nil {
					t.Error(err)
				}
				b.Apply(file)
				b.Reconcile(file)
				b.Overrides("retry")
			}
		}()
	}
	wg.Wait()
}

// A PUT that read the file before a reload put a newer one in force: the
// override of a key the newer file changed recorded the older value, so it is
// dropped at once (the rebuild leaves it out already), not kept unused until it
// would come back to force when the file returns to the old value.
func TestSetAgainstAFileAReloadReplaced(t *testing.T) {
	b, _ := open(t, t.TempDir())
	old := parse(t, fileYAML)
	b.Reconcile(old) // at start
	newer := parse(t, strings.Replace(fileYAML, "rounds: 3", "rounds: 4", 1))
	b.Reconcile(newer) // the reload, between the caller's read of the file and Set
	if _, err := b.Set(old, "retry", map[string]any{"rounds": 7, "jitter": 0.1}, noop); err != nil {
		t.Fatal(err)
	}
	over := b.Overrides("retry")
	if _, ok := over["rounds"]; ok || over["jitter"] == nil {
		t.Fatalf("overrides %v: want jitter kept, rounds (set against rounds: 3, now 4) dropped", over)
	}
	// the file back at the old value does not bring it back
	if cfg, _ := b.Apply(old); cfg.Retry.Rounds != 3 {
		t.Fatalf("rounds %d after the file went back", cfg.Retry.Rounds)
	}
}
