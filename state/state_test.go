package state

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
)

// childEnv makes the test binary a writer that the crash test kills.
const childEnv = "GATECTL_STATE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild writes records as fast as it can, printing the number of each one
// after its transaction committed, until it is killed.
func crashChild(dir string) {
	st, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	first, _ := strconv.Atoi(os.Getenv(childEnv + "_FROM"))
	for i := first; ; i++ {
		if err := st.SaveSession(sessionID(i), recordFor(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
		if err := st.Save(budgetKeyFor(i), budgetFor(i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(5)
		}
		fmt.Fprintf(os.Stdout, "%d\n", i) // unbuffered: the parent sees it at once
	}
}

func sessionID(i int) string { return fmt.Sprintf("session-%06d", i) }

func recordFor(i int) pool.SessionRecord {
	r := pool.SessionRecord{Switch: "on", SwitchSource: pool.SourceSession, Pool: "pool-" + strconv.Itoa(i%7), PoolSource: pool.SourceSession}
	if i%2 == 1 {
		r.Switch = "off"
		r.Parent = sessionID(i - 1)
	}
	return r
}

func budgetKeyFor(i int) retry.BudgetKey {
	return retry.BudgetKey{Session: sessionID(i), Provider: "p" + strconv.Itoa(i%3)}
}

func budgetFor(i int) retry.Budget {
	return retry.Budget{Turn: "t" + strconv.Itoa(i), Step: i % 5, Rounds: i % 9, UpdatedAt: time.Unix(int64(i), 0).UTC()}
}

// TestCrashSafety kills a writing process with SIGKILL mid-writes, three times
// over one file, and checks after each that the file opens, passes bbolt's
// consistency check, and holds every record the writer saw committed.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	dir := t.TempDir()
	next := 0
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir, childEnv+"_FROM="+strconv.Itoa(next))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		last := -1
		target := next + 40 + 25*round
		for sc.Scan() {
			n, err := strconv.Atoi(sc.Text())
			if err != nil {
				t.Fatalf("child said %q", sc.Text())
			}
			last = n
			if n >= target {
				break
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if last < target {
			t.Fatalf("round %d: the child stopped at %d: %s", round, last, stderr.String())
		}

		st, err := Open(dir)
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		if err := st.Check(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := 0; i <= last; i++ {
			rec, ok, err := st.LoadSession(sessionID(i))
			if err != nil || !ok || rec != recordFor(i) {
				t.Fatalf("round %d: session %d = %+v %v %v; want %+v", round, i, rec, ok, err, recordFor(i))
			}
			b, ok, err := st.Load(budgetKeyFor(i))
			if err != nil || !ok || b != budgetFor(i) {
				t.Fatalf("round %d: budget %d = %+v %v %v", round, i, b, ok, err)
			}
		}
		// The record the kill may have interrupted is either whole or absent.
		if rec, ok, err := st.LoadSession(sessionID(last + 1)); err != nil || ok && rec != recordFor(last+1) {
			t.Fatalf("round %d: the interrupted record is torn: %+v %v %v", round, rec, ok, err)
		}
		t.Logf("round %d: killed after record %d; all there", round, last)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		next = last + 1
	}
}

func TestOpenMissingIsAFreshStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "state")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Path() != filepath.Join(dir, FileName) {
		t.Errorf("path %s", st.Path())
	}
	if n, err := st.Sessions(); err != nil || n != 0 {
		t.Errorf("Sessions = %d, %v", n, err)
	}
	if _, ok, err := st.LoadSession("s"); ok || err != nil {
		t.Errorf("LoadSession on a fresh file = %v, %v", ok, err)
	}
}

func TestOpenCorrupt(t *testing.T) {
	valid := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), FileName)
		st, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if err := st.SaveSession(sessionID(i), recordFor(i)); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
		return path
	}
	cases := []struct {
		name  string
		setup func(t *testing.T) string
	}{
		{"garbage", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), FileName)
			b := make([]byte, 32<<10)
			for i := range b {
				b[i] = byte(i*7 + 3)
			}
			os.WriteFile(path, b, 0o600)
			return path
		}},
		{"text", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), FileName)
			os.WriteFile(path, []byte("listen: 127.0.0.1:7878\n"), 0o600)
			return path
		}},
		{"empty", func(t *testing.T) string {
			path := valid(t)
			os.Truncate(path, 0) // what a truncating write left behind
			return path
		}},
		{"truncated", func(t *testing.T) string {
			path := valid(t)
			os.Truncate(path, 100)
			return path
		}},
		{"cut short at 8 KiB", func(t *testing.T) string { // a page past the end is a fault (SIGBUS), not an error
			path := valid(t)
			os.Truncate(path, 8192)
			return path
		}},
		{"cut short at half", func(t *testing.T) string {
			path := valid(t)
			info, _ := os.Stat(path)
			os.Truncate(path, info.Size()/2/4096*4096)
			return path
		}},
		{"both meta pages smashed", func(t *testing.T) string {
			path := valid(t)
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			defer f.Close()
			junk := make([]byte, 64)
			for i := range junk {
				junk[i] = 0xAB
			}
			f.WriteAt(junk, 16)      // meta page 0, past the page header
			f.WriteAt(junk, 4096+16) // meta page 1
			return path
		}},
		{"data pages smashed", func(t *testing.T) string {
			path := valid(t)
			info, _ := os.Stat(path)
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			defer f.Close()
			junk := make([]byte, 4096)
			for i := range junk {
				junk[i] = byte(255 - i%251)
			}
			for off := int64(2 * 4096); off < info.Size(); off += 4096 {
				f.WriteAt(junk, off)
			}
			return path
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.setup(t)
			st, err := OpenFile(path)
			if err == nil {
				st.Close()
				t.Fatal("opened a corrupt file")
			}
			t.Log(err)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move the file aside") {
				t.Errorf("error %v: want ErrCorrupt naming %s", err, path)
			}
			if strings.HasPrefix(c.name, "cut short") && !strings.Contains(err.Error(), "cut short") {
				t.Errorf("error %v: want it to say the file was cut short", err)
			}
			if c.name == "empty" && !strings.Contains(err.Error(), "the file is empty") {
				t.Errorf("error %v: want it to say the file is empty", err)
			}
			if info, serr := os.Stat(path); c.name == "empty" && (serr != nil || info.Size() != 0) {
				t.Errorf("the refused file was changed: %v, %v", info, serr)
			}
		})
	}
}

// A file cut short under the running process: reading a page it no longer
// holds faults (SIGBUS), which killed the whole server. It is an error naming
// the file now, each time, and the store goes on answering.
func TestFileCutShortWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	st, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 400 {
		if err := st.SaveSession(sessionID(i), recordFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(path, 8192); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := st.Sessions()
		if err == nil {
			t.Skip("this platform reads a cut file without a fault") // (bbolt's map follows the file on some)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("reading a file cut short: %v, want ErrCorrupt naming %s", err, path)
		}
	}
	if err := st.Check(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check on a file cut short: %v, want ErrCorrupt", err)
	}
}

// A directory where the state file should be is named as one, not as a damaged file.
func TestOpenDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path); err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("a directory: %v, want an error saying it is a directory", err)
	}
}

func TestOpenLocked(t *testing.T) {
	old := lockTimeout
	lockTimeout = 50 * time.Millisecond
	defer func() { lockTimeout = old }()
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = Open(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) {
		t.Errorf("second Open = %v, want ErrLocked naming the file", err)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucketIfNotExists(bucketMeta)
		return b.Put(keySchema, []byte("99"))
	})
	db.Close()
	if _, err := OpenFile(path); !errors.Is(err, ErrNewer) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open = %v, want ErrNewer", err)
	}
}

func TestSessionsThroughEngine(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := pool.NewSessions(st)
	if _, err := s.SetSwitch("parent", "off"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPool("parent", "medium"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork("child", "parent"); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// A restart: a new store and a new Sessions read the same settings back.
	st, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = pool.NewSessions(st)
	got, err := s.Get("child")
	want := pool.SessionRecord{Switch: "off", SwitchSource: pool.SourceInherited, Pool: "medium", PoolSource: pool.SourceInherited, Parent: "parent"}
	if err != nil || got != want {
		t.Errorf("child after restart = %+v, %v; want %+v", got, err, want)
	}
	// Clearing a record deletes it.
	s.SetSwitch("parent", "default")
	s.SetPool("parent", "default")
	if _, ok, _ := st.LoadSession("parent"); ok {
		t.Error("an empty record was kept")
	}
	if err := st.SaveSession("", want); err == nil {
		t.Error("saved an empty session id")
	}
}

func TestBudgets(t *testing.T) {
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Keys that would collide under a naive separator stay apart.
	k1 := retry.BudgetKey{Session: "a\x00b", Provider: "c"}
	k2 := retry.BudgetKey{Session: "a", Provider: "\x00bc"}
	b1 := retry.Budget{Turn: "t1", Rounds: 3, UpdatedAt: t0}
	b2 := retry.Budget{Turn: "t2", LongTerm: 4, UpdatedAt: t0.Add(time.Hour)}
	if err := st.Save(k1, b1); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(k2, b2); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := st.Load(k1); err != nil || !ok || got != b1 {
		t.Errorf("Load(k1) = %+v %v %v", got, ok, err)
	}
	if got, ok, err := st.Load(k2); err != nil || !ok || got != b2 {
		t.Errorf("Load(k2) = %+v %v %v", got, ok, err)
	}
	if _, ok, err := st.Load(retry.BudgetKey{Session: "none"}); ok || err != nil {
		t.Errorf("Load(missing) = %v %v", ok, err)
	}
	if n, err := st.PruneBudgets(t0.Add(time.Minute)); err != nil || n != 1 {
		t.Errorf("PruneBudgets = %d, %v", n, err)
	}
	if _, ok, _ := st.Load(k1); ok {
		t.Error("pruned budget still there")
	}
	if _, ok, _ := st.Load(k2); !ok {
		t.Error("fresh budget pruned")
	}
}

// Runtime settings survive a reopen; nil deletes; a file written before the
// settings bucket existed opens and gets it.
func TestSettingsRecords(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSettings("retry", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSettings("gate", []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSettings("gate", nil); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.LoadSettings()
	if err != nil || len(got) != 1 || string(got["retry"]) != `{"a":1}` {
		t.Fatalf("got %q, %v", got, err)
	}
	// an older file: drop the bucket, reopen
	if err := st.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketSettings) }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, err := st.LoadSettings(); err != nil || len(got) != 0 {
		t.Fatalf("older file: %q, %v", got, err)
	}
}

// TestBudgetsPerTurn: the turn is part of a budget's key, so concurrent turns of
// a session keep records of their own, and a provider/turn split cannot collide.
func TestBudgetsPerTurn(t *testing.T) {
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keys := []retry.BudgetKey{
		{Session: "s", Provider: "p", Turn: "t1"},
		{Session: "s", Provider: "p", Turn: "t2"},
		{Session: "s", Provider: "p"},
		{Session: "s", Provider: "pt", Turn: "1"},
		{Session: "s", Provider: "pt1"},
	}
	for i, k := range keys {
		if err := st.Save(k, retry.Budget{Turn: k.Turn, Rounds: i + 1, UpdatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		if got, ok, err := st.Load(k); err != nil || !ok || got.Rounds != i+1 || got.Turn != k.Turn {
			t.Errorf("Load(%+v) = %+v %v %v, want its own record (rounds %d)", k, got, ok, err, i+1)
		}
	}
	if n, err := st.PruneBudgets(t0.Add(time.Second)); err != nil || n != len(keys) {
		t.Errorf("PruneBudgets = %d, %v; want every turn's record (%d)", n, err, len(keys))
	}
}

// A session record is stamped when saved and when touched (at most once a
// day), and pruned once unused long enough; one written before the file kept
// the time gets the whole span from now on.
func TestSessionRecordsAgeOut(t *testing.T) {
	st, err := OpenFile(filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	st.SetClock(func() time.Time { return now })
	rec := pool.SessionRecord{Switch: pool.SettingOff, SwitchSource: pool.SourceSession}
	for _, id := range []string{"a", "b"} {
		if err := st.SaveSession(id, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.db.Update(func(tx *bolt.Tx) error { // an older gatectl's record
		return tx.Bucket(bucketSessions).Put([]byte("old"), []byte(`{"switch":"off","switchSource":"session"}`))
	}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(3 * 24 * time.Hour)
	if err := st.TouchSessions([]string{"a", "missing"}, now); err != nil {
		t.Fatal(err)
	}
	if ids, err := st.PruneSessions(now.Add(-4 * 24 * time.Hour)); err != nil || len(ids) != 0 {
		t.Fatalf("pruned %v (%v): nothing is 4 days unused (b was saved 3 days ago)", ids, err)
	}
	ids, err := st.PruneSessions(now.Add(-2 * 24 * time.Hour))
	if err != nil || fmt.Sprint(ids) != "[b]" {
		t.Fatalf("pruned %v (%v), want [b]: a was touched, old was stamped at the first prune", ids, err)
	}
	if got, ok, _ := st.LoadSession("a"); !ok || got != rec {
		t.Fatalf("a after the prune: %+v %v", got, ok)
	}
	if got, ok, _ := st.LoadSession("old"); !ok || got != rec {
		t.Fatalf("the older record after the prune: %+v %v", got, ok)
	}
}
