package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// clockedSend is an upstream transport that moves the gate's fake clock by
// late before it writes a call: the call leaves that long after its admission.
type clockedSend struct {
	next  http.RoundTripper
	clock *engine.FakeClock
	late  time.Duration
}

func (c clockedSend) RoundTrip(r *http.Request) (*http.Response, error) {
	c.clock.Advance(c.late)
	return c.next.RoundTrip(r)
}

// A call the proxy writes late after its admission counts in the gate's window
// from when it was written: it is still counted a window after its admission,
// and leaves a window after its send.
func TestProxyCountsACallFromItsSend(t *testing.T) {
	clock := engine.NewFakeClock(pxT0)
	up := newFakeUpstream(t, chatOK(100, 10, 0))
	f := newPxFixtureWith(t, fmt.Sprintf(`
providers:
  up: {kind: openai, baseURL: %s/v1}
gate:
  window: 60s
  defaults: {tpm: 100000, rpm: 1000}
`, up.URL), clock, func(o *Options) {
		o.Transport = clockedSend{next: newTransport(4), clock: clock, late: 5 * time.Second}
	})
	if resp, body := f.call("/v1/chat/completions", chatReq("up/m", "max_tokens", 50)); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// Admitted at pxT0, written at pxT0+5s. The guard keeps an entry 0.5% of
	// the window (300 ms) past it, four times that for the calls of traffic
	// starting cold, as this one is: it leaves at pxT0+66.2s.
	clock.Set(pxT0.Add(61 * time.Second))
	if st := f.status("up", "m"); st.WindowTokens != 110 || st.WindowRequests != 1 {
		t.Fatalf("a window and a second after its admission: %d tokens, %d requests; want the call's 110 and 1", st.WindowTokens, st.WindowRequests)
	}
	clock.Set(pxT0.Add(66*time.Second + 300*time.Millisecond))
	if st := f.status("up", "m"); st.WindowTokens != 0 || st.WindowRequests != 0 {
		t.Fatalf("a window and 1.3 s after its send: %d tokens, %d requests; want none", st.WindowTokens, st.WindowRequests)
	}
}

// answersUnwritten is an upstream transport that answers without the write
// ever being reported (as an early answer can), late by late on the fake clock.
type answersUnwritten struct {
	clock *engine.FakeClock
	late  time.Duration
}

func (a answersUnwritten) RoundTrip(r *http.Request) (*http.Response, error) {
	a.clock.Advance(a.late)
	rec := httptest.NewRecorder()
	chatOK(100, 10, 0)(rec, r)
	return rec.Result(), nil
}

// An answer that comes back before the write was reported counts as the
// send: the provider had the call.
func TestProxyCountsAnEarlyAnswerAsTheSend(t *testing.T) {
	clock := engine.NewFakeClock(pxT0)
	f := newPxFixtureWith(t, `
providers:
  up: {kind: openai, baseURL: http://127.0.0.1:9/v1}
gate:
  window: 60s
  defaults: {tpm: 100000, rpm: 1000}
`, clock, func(o *Options) { o.Transport = answersUnwritten{clock: clock, late: 5 * time.Second} })
	if resp, body := f.call("/v1/chat/completions", chatReq("up/m", "max_tokens", 50)); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	clock.Set(pxT0.Add(61 * time.Second))
	if st := f.status("up", "m"); st.WindowTokens != 110 || st.WindowRequests != 1 {
		t.Fatalf("a window and a second after its admission: %d tokens, %d requests; want the call's 110 and 1", st.WindowTokens, st.WindowRequests)
	}
}
