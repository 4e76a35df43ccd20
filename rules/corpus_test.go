package rules

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/internal/failurejson"
)

// corpusPath is the corpus of real provider errors, in the repository's testdata
// (testdata/corpus/README.md says where it comes from).
var corpusPath = filepath.Join("..", "testdata", "corpus", "provider-errors.jsonl")

// Targets of issue 3.
const (
	classTarget = 0.97
	hintTarget  = 0.95
)

type corpusRecord struct {
	Provider      string `json:"provider"`
	ExpectedClass string `json:"expected_class"`
	ExpectedHint  *int64 `json:"expected_retry_after_ms"`
	Source        string `json:"source"`
}

// hintExact is the corpus's notion of a right hint: both absent, or within 1% or
// 100 ms of each other.
func hintExact(got, want *int64) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	d := *got - *want
	if d < 0 {
		d = -d
	}
	return d <= 100 || float64(d) <= 0.01*float64(*want)
}

func TestCorpus(t *testing.T) {
	fh, err := os.Open(corpusPath)
	if err != nil {
		t.Fatalf("the corpus is part of the repository: %v", err)
	}
	defer fh.Close()
	rs, err := Builtin(Options{Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	var n, classOK, hintOK int
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec corpusRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		f, err := failurejson.Decode(failureOf(t, sc.Bytes()))
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		v, decided, err := engine.NewChain(rs).Classify(context.Background(), f)
		if err != nil || !decided {
			t.Fatalf("line %d: chain: decided=%v err=%v", line, decided, err)
		}
		n++
		if string(v.Class) == rec.ExpectedClass {
			classOK++
		} else {
			t.Logf("line %d (%s): class %s by %s, want %s", line, rec.Provider, v.Class, v.By, rec.ExpectedClass)
		}
		if hintExact(v.RetryAfterMs, rec.ExpectedHint) {
			hintOK++
		} else {
			t.Logf("line %d (%s): retryAfterMs %v by %s, want %v", line, rec.Provider, ptrStr(v.RetryAfterMs), v.By, ptrStr(rec.ExpectedHint))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("empty corpus")
	}
	ca, ha := float64(classOK)/float64(n), float64(hintOK)/float64(n)
	// Printed (not logged) on purpose: the accuracy is the point of this test.
	fmt.Printf("corpus: %d records; class accuracy %d/%d = %.1f%% (target %.0f%%); hint accuracy %d/%d = %.1f%% (target %.0f%%)\n",
		n, classOK, n, 100*ca, 100*classTarget, hintOK, n, 100*ha, 100*hintTarget)
	if ca < classTarget {
		t.Errorf("class accuracy %.1f%% is below %.0f%%", 100*ca, 100*classTarget)
	}
	if ha < hintTarget {
		t.Errorf("hint accuracy %.1f%% is below %.0f%%", 100*ha, 100*hintTarget)
	}
}

// failureOf drops a corpus record's own keys (what it expects, where it comes
// from), leaving the failure object `gatectl classify` reads.
func failureOf(t *testing.T, record []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(record, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"expected_class", "expected_retry_after_ms", "source", "note"} {
		delete(m, k)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptrStr(p *int64) any {
	if p == nil {
		return "null"
	}
	return *p
}
