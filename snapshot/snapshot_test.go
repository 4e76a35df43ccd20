package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

const gatewayRules = `name: mygw
rules:
  - name: throttled
    when: status == 200 && jstr("code") == "GW_THROTTLED"
    class: RATE_LIMIT
    retryAfterMs: jnum("wait_ms")
cases:
  - input: {status: 200, body: '{"code":"GW_THROTTLED","wait_ms":1500}'}
    class: RATE_LIMIT
    retryAfterMs: 1500
`

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func classify(t *testing.T, s *Snapshot, f engine.Failure) engine.Verdict {
	t.Helper()
	v, _, err := s.Chain.Classify(context.Background(), &f)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestBuildDefault(t *testing.T) {
	s, err := Load(context.Background(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Gate.Window != time.Minute || s.Gate.SafetyFactor != 0 || s.Retry.Rounds != 8 || s.Pools != nil {
		t.Fatalf("defaults: gate %+v retry rounds %d", s.Gate, s.Retry.Rounds)
	}
	v := classify(t, s, engine.Failure{Status: 429, Body: `{"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}`})
	if v.Class != engine.ClassQuota || !strings.HasPrefix(v.By, "builtin/") {
		t.Fatalf("verdict %+v", v)
	}
}

func TestBuildChainOrderAndPools(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mygw.yaml"), gatewayRules)
	writeFile(t, filepath.Join(dir, "gatectl.yaml"), `
providers:
  deepseek: {kind: openai, baseURL: "https://api.deepseek.com/v1"}
  openrouter: {kind: openai, baseURL: "https://openrouter.ai/api/v1"}
classifiers:
  - rules: mygw.yaml
pools:
  medium:
    scoring: "remaining"
    routes:
      - {provider: deepseek, model: deepseek-chat}
      - {provider: openrouter, model: deepseek/deepseek-chat}
`)
	s, err := Load(context.Background(), filepath.Join(dir, "gatectl.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := classify(t, s, engine.Failure{Status: 200, Body: `{"code":"GW_THROTTLED","wait_ms":1500}`})
	if v.Class != engine.ClassRateLimit || v.By != "mygw/throttled" || *v.RetryAfterMs != 1500 {
		t.Fatalf("verdict %+v", v)
	}
	if s.Pools == nil || s.Pools.Pool("medium") == nil || s.Scoring["medium"] != "expr remaining" {
		t.Fatalf("pools %+v scoring %v", s.Pools, s.Scoring)
	}
	if len(s.Files) != 2 {
		t.Fatalf("files %v", s.Files)
	}
}

func TestBuildReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad.yaml"), "name: bad\nrules:\n  - name: r\n    when: status ==\n    class: RATE_LIMIT\n")
	writeFile(t, filepath.Join(dir, "gatectl.yaml"), `
providers:
  deepseek: {kind: openai, baseURL: "https://api.deepseek.com/v1"}
classifiers:
  - rules: bad.yaml
  - rules: missing.yaml
pools:
  medium:
    scoring: "remaining +"
    routes: [{provider: deepseek, model: deepseek-chat}]
`)
	_, err := Load(context.Background(), filepath.Join(dir, "gatectl.yaml"), Options{})
	if err == nil {
		t.Fatal("built")
	}
	for _, want := range []string{"classifiers[0].rules", "bad.yaml", "classifiers[1].rules", "missing.yaml", "pools.medium.scoring"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestReloadKeepsOldSnapshotOnFailure(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, "gate: {defaults: {tpm: 5000, rpm: 10}}\n")
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var swaps []uint64
	m.OnSwap(func(old, new *Snapshot) { swaps = append(swaps, new.Version) })
	writeFile(t, cfg, "gate: {defaults: {tpm: 7000, rpm: 10}}\n")
	if err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.Current(); got.Gate.Defaults.TPM != 7000 || got.Version != 1 {
		t.Fatalf("after reload: %+v v%d", got.Gate.Defaults, got.Version)
	}
	writeFile(t, cfg, "gate: {defaults: {tpm: -1}}\nbogus: 1\n")
	err = m.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), "gatectl.yaml:") {
		t.Fatalf("err %v: want the file and line", err)
	}
	if got := m.Current(); got.Gate.Defaults.TPM != 7000 {
		t.Fatalf("a failed reload replaced the snapshot: %+v", got.Gate.Defaults)
	}
	if r, f, last := m.Stats(); r != 1 || f != 1 || last == "" {
		t.Fatalf("stats %d %d %q", r, f, last)
	}
	if len(swaps) != 1 || swaps[0] != 1 {
		t.Fatalf("swaps %v", swaps)
	}
}

// The watcher picks an edited rule file up (a real file system event; the poll
// backstop is set long so that the notification is what fires).
func TestWatchReloadsOnRuleFileChange(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mygw.yaml"), gatewayRules)
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, "classifiers:\n  - rules: mygw.yaml\n")
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	swapped := make(chan *Snapshot, 4)
	m.OnSwap(func(_, s *Snapshot) { swapped <- s })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go m.Watch(ctx, WatchOptions{Debounce: 20 * time.Millisecond, Poll: time.Hour, Ready: func() { close(ready) }})
	<-ready
	// an editor's rename-write: write a temporary file, rename it over the original
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond) // rewrite until the watcher is up
	defer tick.Stop()
	for {
		tmp := filepath.Join(dir, ".mygw.yaml.swp")
		writeFile(t, tmp, strings.ReplaceAll(gatewayRules, "RATE_LIMIT", "OVERLOADED")) // the rule and its golden case
		if err := os.Rename(tmp, filepath.Join(dir, "mygw.yaml")); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-swapped:
			v := classify(t, s, engine.Failure{Status: 200, Body: `{"code":"GW_THROTTLED","wait_ms":1500}`})
			if v.Class != engine.ClassOverloaded {
				t.Fatalf("reloaded v%d still says %+v", s.Version, v)
			}
			return
		case <-tick.C:
		case <-deadline:
			t.Fatal("no reload after the rule file changed")
		}
	}
}

// A rule file whose golden case fails refuses the reload.
func TestReloadRunsGoldenCases(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mygw.yaml"), gatewayRules)
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, "classifiers:\n  - rules: mygw.yaml\n")
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "mygw.yaml"), strings.Replace(gatewayRules, "class: RATE_LIMIT\n    retryAfterMs", "class: OVERLOADED\n    retryAfterMs", 1))
	if err := m.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "mygw.yaml") {
		t.Fatalf("err %v: want the failing golden case named", err)
	}
	if v := classify(t, m.Current(), engine.Failure{Status: 200, Body: `{"code":"GW_THROTTLED","wait_ms":1500}`}); v.Class != engine.ClassRateLimit {
		t.Fatalf("verdict %+v", v)
	}
}

// A config edit that names a rule file not written yet fails to reload; writing
// the file afterwards retries by itself.
func TestWatchRetriesWhenAMissingFileAppears(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	writeFile(t, cfg, "gate: {defaults: {tpm: 5000, rpm: 10}}\n")
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 4)
	swapped := make(chan *Snapshot, 4)
	m.OnSwap(func(_, s *Snapshot) { swapped <- s })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go m.Watch(ctx, WatchOptions{Debounce: 20 * time.Millisecond, Poll: 100 * time.Millisecond, Ready: func() { close(ready) },
		Attempted: func(err error) {
			if err != nil {
				failed <- err
			}
		}})
	<-ready
	writeFile(t, cfg, "classifiers:\n  - rules: extra/mygw.yaml\n")
	select {
	case <-failed: // the watcher is armed again: the missing file is now watched
	case <-time.After(10 * time.Second):
		t.Fatal("the edit was not noticed")
	}
	if err := os.Mkdir(filepath.Join(dir, "extra"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "extra", "mygw.yaml"), gatewayRules)
	select {
	case s := <-swapped:
		v := classify(t, s, engine.Failure{Status: 200, Body: `{"code":"GW_THROTTLED","wait_ms":1500}`})
		if v.By != "mygw/throttled" {
			t.Fatalf("verdict %+v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("creating the missing rule file did not retry the reload")
	}
}

// A config written in two pieces with a pause longer than the debounce (a
// truncating write, then the rest) parses at the pause; reloading it then
// dropped the runtime settings its missing keys seemed to change. The watcher
// reloads once the file held still for a whole debounce: only the whole file.
func TestWatchWaitsForAFileToHoldStill(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gatectl.yaml")
	head := "gate: {defaults: {tpm: 5000, rpm: 10}}\n"
	writeFile(t, cfg, head+"retry: {rounds: 7}\n")
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var rounds []int
	m.OnSwap(func(_, s *Snapshot) { mu.Lock(); rounds = append(rounds, s.Config.Retry.Rounds); mu.Unlock() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	const debounce = 500 * time.Millisecond
	go m.Watch(ctx, WatchOptions{Debounce: debounce, Poll: time.Hour, Ready: func() { close(ready) }})
	<-ready
	f, err := os.OpenFile(cfg, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(head); err != nil { // valid alone: retry.rounds back to its default
		t.Fatal(err)
	}
	time.Sleep(debounce * 6 / 5) // past one debounce, well within two (a loaded machine may stretch it)
	if _, err := f.WriteString("retry: {rounds: 6}\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := append([]int(nil), rounds...)
		mu.Unlock()
		if len(got) > 0 {
			if got[0] != 6 {
				t.Fatalf("reloaded with retry.rounds %v: the half-written file was loaded first", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no reload after the file was written")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A ConfigMap mounted by Kubernetes is updated by renaming its ..data link to
// a new directory; the config file is a link through it and sees no event of
// its own. The swap reloads without waiting for the poll.
func TestWatchFollowsAConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, body string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "gatectl.yaml"), body)
	}
	version("..2026_01", "gate: {defaults: {tpm: 5000, rpm: 10}}\n")
	if err := os.Symlink("..2026_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gatectl.yaml")
	if err := os.Symlink(filepath.Join("..data", "gatectl.yaml"), cfg); err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	swapped := make(chan *Snapshot, 4)
	m.OnSwap(func(_, s *Snapshot) { swapped <- s })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go m.Watch(ctx, WatchOptions{Debounce: 20 * time.Millisecond, Poll: time.Hour, Ready: func() { close(ready) }})
	<-ready
	version("..2026_02", "gate: {defaults: {tpm: 6000, rpm: 10}}\n")
	if err := os.Symlink("..2026_02", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-swapped:
		if got := s.Config.Gate.Defaults.TPM; got != 6000 {
			t.Fatalf("reloaded with tpm %d, want 6000", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload after the ..data swap")
	}
}
