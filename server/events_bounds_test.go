package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestEventsSubscriberCap(t *testing.T) {
	e := newAPIEnv(t, apiTestConfig+"api:\n  maxSubscribers: 2\n")
	a := e.openEvents(t, "")
	e.openEvents(t, "?types=wait")
	status, body, h := e.do(http.MethodGet, "/gate/v1/events", "")
	_, msg := apiErrorOf(t, body)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(msg, "api.maxSubscribers") || !strings.Contains(msg, "at most 2") {
		t.Fatalf("third stream: %d %v %s", status, h, body)
	}
	a.close()
	apiEventually(t, "a stream to end", func() bool { return e.srv.Bus().Subscribers() == 1 })
	e.openEvents(t, "") // room again
}

// Streams read one bounded ring at their own pace: Publish never waits for them,
// and a stream that falls more than the ring behind is told how much it lost.
func TestEventsStreamRingBounded(t *testing.T) {
	b := NewBusCap(0)
	st, err := b.SubscribeStream(map[string]bool{"wait": true})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := b.SubscribeStream(nil)
	select {
	case <-st.Ready():
		t.Fatal("ready before any event")
	default:
	}
	for i := range 5 {
		b.Publish(Event{Type: "wait", At: time.Unix(int64(i), 0), Data: map[string]int{"i": i}})
		b.Publish(Event{Type: "learn"})
	}
	<-st.Ready()
	recs, dropped, ended := st.take()
	if len(recs) != 5 || dropped != 0 || ended {
		t.Fatalf("took %d records, %d dropped, ended %v", len(recs), dropped, ended)
	}
	if !strings.HasPrefix(string(recs[0]), "event: wait\ndata: {\"type\":\"wait\"") || !strings.HasSuffix(string(recs[0]), "\n\n") {
		t.Fatalf("record %q", recs[0])
	}
	// other falls behind: the ring keeps the last eventsLog records.
	for range eventsLog {
		b.Publish(Event{Type: "learn"})
	}
	if recs, dropped, _ := other.take(); len(recs) != eventsLog || dropped != 10 {
		t.Fatalf("the slow stream took %d, dropped %d", len(recs), dropped)
	}
	if recs, dropped, _ := st.take(); len(recs) != 0 || dropped != 0 {
		t.Fatalf("filtered stream: %d %d", len(recs), dropped)
	}
	st.Close()
	st.Close() // twice is once
	if n := b.Streams(); n != 1 {
		t.Fatalf("streams after close: %d", n)
	}
	b.CloseAll()
	<-other.Ready()
	if _, _, ended := other.take(); !ended {
		t.Fatal("CloseAll left a stream open")
	}
}

func TestEventsBatchDelay(t *testing.T) {
	for _, c := range []struct {
		streams int
		want    time.Duration
	}{{0, eventsMinBatchDelay}, {1, eventsMinBatchDelay}, {256, 128 * time.Millisecond}, {2000, time.Second}, {100000, eventsMaxBatchDelay}} {
		if got := eventsBatchDelay(c.streams); got != c.want {
			t.Errorf("%d streams: %v, want %v", c.streams, got, c.want)
		}
	}
}

// The ring's edges: a stream exactly eventsLog behind loses nothing and reads
// the records in order across the wrap; further behind loses exactly the oldest ones.
func TestEventsStreamRingEdges(t *testing.T) {
	b := NewBusCap(0)
	exact, _ := b.SubscribeStream(nil)
	past, _ := b.SubscribeStream(nil)
	for i := range eventsLog + 7 { // wraps the ring before the streams read
		if i == 7 {
			exact.cursor = b.next // exact starts here: eventsLog records follow
		}
		b.Publish(Event{Type: "wait", Data: i})
	}
	recs, dropped, _ := exact.take()
	if len(recs) != eventsLog || dropped != 0 {
		t.Fatalf("exactly %d behind: took %d, dropped %d", eventsLog, len(recs), dropped)
	}
	if !strings.Contains(string(recs[0]), `"data":7}`) || !strings.Contains(string(recs[eventsLog-1]), fmt.Sprintf(`"data":%d}`, eventsLog+6)) {
		t.Fatalf("first %q, last %q: want events 7 and %d", recs[0], recs[eventsLog-1], eventsLog+6)
	}
	recs, dropped, _ = past.take()
	if len(recs) != eventsLog || dropped != 7 || !strings.Contains(string(recs[0]), `"data":7}`) {
		t.Fatalf("%d behind: took %d, dropped %d, first %q", eventsLog+7, len(recs), dropped, recs[0])
	}
	if recs, dropped, _ := exact.take(); len(recs) != 0 || dropped != 0 {
		t.Fatalf("caught up: took %d, dropped %d", len(recs), dropped)
	}
}
