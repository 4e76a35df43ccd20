package report

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/internal/gatelog"
	"github.com/hashicorp/go-hclog"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// A gate that waits, is rate limited, learns and fails open: the report fed
// live and the report read back from the JSON log of the same run agree.
func TestLiveAndLogAgree(t *testing.T) {
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info, JSONFormat: true})
	clk := engine.NewFakeClock(t0)
	live := New(t0)
	cfg := gate.DefaultConfig()
	cfg.Defaults = gate.ModelLimits{TPM: 10000, RPM: 100, SafetyFactor: 1}
	cfg.Pace = 0
	logHook := gatelog.Hook(logger)
	l, err := gate.NewLedger(cfg, clk, gate.WithEventHook(func(e gate.Event) {
		logHook(e)
		live.Observe(FromGate(e))
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := gate.Request{Provider: "p", Model: "m", Session: "s1", InputTokens: 5000, MaxTokens: 1000}
	first, err := l.Admit(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Settle(clk.Now(), first, gate.Usage{InputTokens: 5000, OutputTokens: 1000}); err != nil {
		t.Fatal(err)
	}
	// the second waits for the window
	done := make(chan gate.Ticket, 1)
	go func() {
		tk, _ := l.Admit(ctx, big)
		done <- tk
	}()
	for deadline := time.Now().Add(5 * time.Second); clk.Timers() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the second call never waited")
		}
		time.Sleep(time.Millisecond)
	}
	// Each advance fires the waiter's timer; it either is admitted or sets its next
	// one (its margin needs a little more than the window).
	var second gate.Ticket
	admitted := false
	for i := 0; i < 5 && !admitted; i++ {
		clk.Advance(61 * time.Second)
		for deadline := time.Now().Add(5 * time.Second); ; {
			select {
			case second = <-done:
				admitted = true
			default:
			}
			if admitted || clk.Timers() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the waiter neither was admitted nor slept again")
			}
			time.Sleep(time.Millisecond)
		}
	}
	if !admitted {
		t.Fatalf("the second call was not admitted: %+v", l.BucketStatus(clk.Now(), "p", "m"))
	}
	if second.Waited == 0 {
		t.Fatalf("ticket: %+v", second)
	}
	if err := l.Settle(clk.Now(), second, gate.Usage{InputTokens: 5000, OutputTokens: 1000}); err != nil {
		t.Fatal(err)
	}
	// a 429 moves the learner; a reset is a step too
	l.RateLimited(clk.Now(), "p", "m", 0)
	l.Reset(clk.Now(), "p", "m")
	// a reservation above the whole budget is an anomaly
	clk.Advance(2 * time.Minute)
	if _, w := l.Submit(clk.Now(), gate.Request{Provider: "p", Model: "m", Session: "s3", InputTokens: 50000, MaxTokens: 1000}); w != nil {
		w.Cancel(clk.Now())
		t.Fatal("the over-budget call waited")
	}

	got := live.Report(clk.Now(), 0)
	if len(got.Models) != 1 {
		t.Fatalf("live: %+v", got)
	}
	m := got.Models[0]
	if m.Model != "p/m" || m.Waited != 1 || m.WaitTotalMs < 60000 || m.Reasons["tpm"] != 1 || m.RateLimited != 1 ||
		m.OverBudget != 1 || len(m.Anomalies) != 1 || m.Budget == nil || len(m.Steps) < 2 {
		t.Fatalf("live: %+v", m)
	}

	offline := New(time.Time{})
	read, skipped, err := ReadLog(offline, strings.NewReader("not json\n"+logs.String()))
	if err != nil || read == 0 || skipped != 1 {
		t.Fatalf("ReadLog: %d read, %d skipped, %v", read, skipped, err)
	}
	o := offline.Report(offline.Last(), 0)
	if len(o.Models) != 1 {
		t.Fatalf("offline: %+v", o)
	}
	om := o.Models[0]
	if om.Model != m.Model || om.Waited != m.Waited || om.WaitTotalMs != m.WaitTotalMs || om.WaitMaxMs != m.WaitMaxMs ||
		fmt.Sprint(om.Reasons) != fmt.Sprint(m.Reasons) || *om.Budget != *m.Budget || om.RateLimited != m.RateLimited ||
		om.OverBudget != m.OverBudget || len(om.Steps) != len(m.Steps) || len(om.Anomalies) != len(m.Anomalies) {
		t.Fatalf("offline %+v\nlive    %+v\nlog:\n%s", om, m, logs.String())
	}
	for i := range m.Steps {
		if om.Steps[i].Step != m.Steps[i].Step || om.Steps[i].From != m.Steps[i].From || om.Steps[i].To != m.Steps[i].To {
			t.Fatalf("step %d: offline %+v live %+v", i, om.Steps[i], m.Steps[i])
		}
	}
}

// Whatever it is fed, the book stays bounded: models, steps, anomalies, slots.
func TestBounds(t *testing.T) {
	b := New(t0)
	for i := range MaxModels + 50 {
		b.Observe(Event{Kind: KindAdmitted, At: t0, Model: fmt.Sprintf("p/m%d", i), Reason: "tpm", Wait: time.Second})
	}
	r := b.Report(t0, 0)
	if len(r.Models) != MaxModels+1 {
		t.Fatalf("%d models", len(r.Models))
	}
	for _, m := range r.Models {
		if m.Model == OtherModel && m.Waited != 50 {
			t.Fatalf("other: %+v", m)
		}
	}
	for i := range MaxSteps + 30 {
		b.Observe(Event{Kind: KindLearn, At: t0.Add(time.Duration(i) * time.Second), Model: "p/m0", Step: "cut", From: int64(i + 1), To: int64(i)})
		b.Observe(Event{Kind: KindFailOpen, At: t0.Add(time.Duration(i) * time.Second), Model: "p/m0", Reason: "max-wait:tpm"})
	}
	// a day and more of minutes
	for i := range 2 * 24 * 60 {
		b.Observe(Event{Kind: KindRateLimited, At: t0.Add(time.Duration(i) * time.Minute), Model: "p/m1"})
	}
	b.mu.Lock()
	slots := len(b.slots)
	b.mu.Unlock()
	if slots > int(Retention/Slot)+1 {
		t.Fatalf("%d slots", slots)
	}
	now := t0.Add(48 * time.Hour)
	r = b.Report(now, 0)
	for _, m := range r.Models {
		switch m.Model {
		case "p/m0":
			if len(m.Steps) != MaxSteps || m.Steps[len(m.Steps)-1].To != MaxSteps+29 || len(m.Anomalies) != MaxAnomalies || m.FailOpen != MaxSteps+30 {
				t.Fatalf("m0: %d steps, %d anomalies, %d fail-open", len(m.Steps), len(m.Anomalies), m.FailOpen)
			}
		case "p/m1":
			if m.RateLimited != 2*24*60 {
				t.Fatalf("lifetime counts: %d", m.RateLimited)
			}
		}
	}
	// the last hour: 60 rate limits of m1 (slot granularity), nothing of m0
	r = b.Report(now.Add(-time.Minute), time.Hour)
	if len(r.Models) != 1 || r.Models[0].Model != "p/m1" || r.Models[0].RateLimited < 60 || r.Models[0].RateLimited > 61 {
		t.Fatalf("last hour: %+v", r.Models)
	}
}

// BenchmarkObserve is the report's cost on the gate's event path (one call per
// wait, admission after a wait, 429 or learner step; none for a call that did
// not wait).
func BenchmarkObserve(b *testing.B) {
	bk := New(t0)
	e := Event{Kind: KindAdmitted, Model: "deepseek/deepseek-chat", Reason: "tpm", Wait: 2 * time.Second, TokenBudget: 90000}
	b.ReportAllocs()
	for i := range b.N {
		e.At = t0.Add(time.Duration(i) * time.Millisecond)
		bk.Observe(e)
	}
}

// A line longer than maxLogLine (a huge warning, say) is skipped and counted;
// the gate lines around it are still read.
func TestReadLogSkipsLongLines(t *testing.T) {
	gateLine := func(at time.Time) string {
		return `{"@timestamp":"` + at.Format(time.RFC3339Nano) + `","event":"rate-limited","model":"p/m"}` + "\n"
	}
	huge := `{"@message":"` + strings.Repeat("x", 2*maxLogLine) + `"}` + "\n"
	in := gateLine(t0) + huge + gateLine(t0.Add(time.Second)) + strings.Repeat("y", maxLogLine+5) // the last without a newline
	b := New(time.Time{})
	read, skipped, err := ReadLog(b, strings.NewReader(in))
	if err != nil || read != 2 || skipped != 2 {
		t.Fatalf("ReadLog: %d read, %d skipped, %v", read, skipped, err)
	}
	if r := b.Report(b.Last(), 0); len(r.Models) != 1 || r.Models[0].RateLimited != 2 {
		t.Fatalf("report: %+v", r)
	}
	// a line of exactly maxLogLine is read
	exact := `{"event":"rate-limited","model":"p/m","pad":"`
	exact += strings.Repeat("z", maxLogLine-len(exact)-2) + `"}`
	if read, skipped, err := ReadLog(New(time.Time{}), strings.NewReader(exact+"\n")); err != nil || read != 1 || skipped != 0 {
		t.Fatalf("a line of maxLogLine bytes: %d read, %d skipped, %v", read, skipped, err)
	}
}

// A period reaching back before the counters start says it starts with them.
func TestReportFromNotBeforeStart(t *testing.T) {
	b := New(t0)
	b.Observe(Event{Kind: KindRateLimited, At: t0.Add(time.Minute), Model: "p/m"})
	now := t0.Add(2 * time.Minute)
	if r := b.Report(now, 30*time.Minute); !r.From.Equal(t0) || r.Events != 1 {
		t.Fatalf("since 30m, 2m after the start: from %s, %d events", r.From, r.Events)
	}
	if r := b.Report(now, time.Minute); !r.From.Equal(now.Add(-time.Minute)) {
		t.Fatalf("since 1m: from %s", r.From)
	}
}

// The counters are kept in whole minutes: a period says it starts at the
// minute that holds now-since, and its steps are read over that same period,
// so a 429 it counts comes with the learner step beside it.
func TestReportPeriodInWholeSlots(t *testing.T) {
	b := New(t0)
	at := t0.Add(5*time.Minute + 28*time.Second)
	b.Observe(Event{Kind: KindRateLimited, At: at, Model: "p/m"})
	b.Observe(Event{Kind: KindLearn, At: at, Model: "p/m", Step: "trigger", From: 0, To: 100})
	r := b.Report(at.Add(3*time.Second), time.Second)
	if !r.From.Equal(t0.Add(5*time.Minute)) || len(r.Models) != 1 || r.Models[0].RateLimited != 1 || len(r.Models[0].Steps) != 1 {
		t.Fatalf("since 1s, 3s after a 429: from %s, %+v; want from the minute's start, the 429 and its step", r.From, r.Models)
	}
}
