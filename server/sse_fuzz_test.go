package server

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzSSEReader: the event-stream reader never panics and always ends; each
// event's raw bytes appear in the input, in order; the same bytes read one at a
// time give the same events and the same end; and following usage over any event
// of either API never panics. Seeds: testdata/fuzz/FuzzSSEReader.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n"))
	f.Add([]byte("\r\n: ping\r\nevent: error\r\ndata: {\"error\":{}}\r\n\r\ndata: cut"))
	f.Add([]byte("data: a\ndata: b\n\n\n\nevent:\ndata:\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		whole := readAllEvents(t, in, bytes.NewReader(in))
		bytewise := readAllEvents(t, in, iotest.OneByteReader(bytes.NewReader(in)))
		if len(whole.events) != len(bytewise.events) || whole.end != bytewise.end {
			t.Fatalf("whole: %d events, end %v; byte by byte: %d, end %v", len(whole.events), whole.end, len(bytewise.events), bytewise.end)
		}
		for i := range whole.events {
			if whole.events[i] != bytewise.events[i] {
				t.Fatalf("event %d differs: %q vs %q", i, whole.events[i], bytewise.events[i])
			}
		}
	})
}

type sseRun struct {
	events []string // raw|name|data of each event
	end    string
}

func readAllEvents(t *testing.T, in []byte, r io.Reader) sseRun {
	rd := newSSEReader(r)
	var run sseRun
	at := 0 // where the last event's raw bytes ended in the input
	for n := 0; ; n++ {
		if n > len(in)+1 {
			t.Fatalf("more events (%d) than input bytes (%d)", n, len(in))
		}
		ev, err := rd.next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, errEventTooLarge):
				run.end = err.Error()
				return run
			}
			t.Fatalf("unexpected error %v", err)
		}
		i := bytes.Index(in[at:], ev.raw)
		if len(ev.raw) == 0 || i < 0 {
			t.Fatalf("event %d's raw bytes %q are not in the input after byte %d", n, ev.raw, at)
		}
		at += i + len(ev.raw)
		for _, kind := range []apiKind{kindOpenAI, kindAnthropic} {
			su := &streamUsage{kind: kind}
			su.observe(&ev)
		}
		run.events = append(run.events, string(ev.raw)+"|"+string(ev.name)+"|"+string(ev.data))
	}
}
