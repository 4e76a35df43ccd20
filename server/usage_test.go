package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gatectl/gatectl/engine/gate"
)

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // longer than the reader's buffer
	cases := []struct {
		name    string
		in      string
		want    []string // each event's data
		names   []string
		lastErr error
	}{
		{"data-only events", "data: a\n\ndata: b\n\n", []string{"a", "b"}, []string{"", ""}, io.EOF},
		{"named, CRLF, comments, extra blank lines", "\r\n: ping\r\nevent: x\r\ndata: 1\r\n\r\n\n\nevent: y\ndata:2\n\n", []string{"1", "2"}, []string{"x", "y"}, io.EOF},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, []string{""}, io.EOF},
		{"a line longer than the buffer", "event: big\ndata: " + long + "\n\n", []string{long}, []string{"big"}, io.EOF},
		{"cut inside an event", "data: a\n\ndata: b", []string{"a"}, []string{""}, io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newSSEReader(strings.NewReader(tc.in))
			var got, names []string
			var raw strings.Builder
			var err error
			for {
				var ev sseEvent
				ev, err = r.next()
				if err != nil {
					break
				}
				got = append(got, string(ev.data))
				names = append(names, string(ev.name))
				raw.Write(ev.raw)
			}
			if !errors.Is(err, tc.lastErr) {
				t.Fatalf("last error %v, want %v", err, tc.lastErr)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || strings.Join(names, "|") != strings.Join(tc.names, "|") {
				t.Fatalf("events %q names %q; want %q %q", got, names, tc.want, tc.names)
			}
			if tc.lastErr == io.EOF && !strings.Contains(tc.in, ": ping") && raw.String() != strings.TrimLeft(tc.in, "\r\n") {
				t.Fatalf("raw bytes changed:\n%q\n%q", raw.String(), tc.in)
			}
		})
	}
}

func TestWireUsage(t *testing.T) {
	cases := []struct {
		name string
		kind apiKind
		body string
		want gate.Usage
		err  bool
	}{
		{"chat with cached prompt", kindOpenAI, `{"usage":{"prompt_tokens":100,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":40}}}`,
			gate.Usage{InputTokens: 60, CacheReadTokens: 40, OutputTokens: 20}, false},
		{"embeddings", kindOpenAI, `{"usage":{"prompt_tokens":8,"total_tokens":8}}`, gate.Usage{InputTokens: 8}, false},
		{"responses", kindOpenAI, `{"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":5}}`,
			gate.Usage{InputTokens: 20, CacheReadTokens: 10, OutputTokens: 5}, false},
		{"anthropic", kindAnthropic, `{"usage":{"input_tokens":3,"cache_read_input_tokens":50,"cache_creation_input_tokens":7,"output_tokens":11}}`,
			gate.Usage{InputTokens: 3, CacheReadTokens: 50, CacheWriteTokens: 7, OutputTokens: 11, CacheReadsUncounted: true}, false},
		{"a 200 carrying an error", kindOpenAI, `{"error":{"message":"overloaded"}}`, gate.Usage{}, true},
		{"anthropic error body", kindAnthropic, `{"type":"error","error":{"type":"overloaded_error"}}`, gate.Usage{}, true},
		{"error null is no error", kindOpenAI, `{"error":null,"usage":{"prompt_tokens":1,"completion_tokens":1}}`, gate.Usage{InputTokens: 1, OutputTokens: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, _, isErr := inspectBody(tc.kind, []byte(tc.body))
			if isErr != tc.err || u != tc.want {
				t.Fatalf("usage %+v error %v; want %+v %v", u, isErr, tc.want, tc.err)
			}
		})
	}
}

// Anthropic's input limit does not count cache reads, OpenAI's TPM does: an
// agent turn that is mostly cache reads spends its uncached input and output
// of an Anthropic model's window, the whole prompt of an OpenAI model's.
func TestProxyCacheReadsCountPerProvider(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			jsonAnswer(200, `{"type":"message","role":"assistant","content":[],"usage":{"input_tokens":100,"cache_creation_input_tokens":50,"cache_read_input_tokens":9000,"output_tokens":10}}`)(w, r)
			return
		}
		chatOK(9100, 10, 9000)(w, r)
	})
	f := newPxFixture(t, streamConfig(up.URL, up.URL), true)
	resp, body := f.call("/v1/messages", map[string]any{"model": "anth/m", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	if resp.StatusCode != 200 {
		t.Fatalf("anthropic: %d %s", resp.StatusCode, body)
	}
	if got := f.status("anth", "m").WindowTokens; got != 160 {
		t.Errorf("anthropic window %d, want 160 (input 100 + cache writes 50 + output 10)", got)
	}
	resp, body = f.call("/v1/chat/completions", chatReq("po/m", "max_tokens", 100))
	if resp.StatusCode != 200 {
		t.Fatalf("openai: %d %s", resp.StatusCode, body)
	}
	if got := f.status("po", "m").WindowTokens; got != 9110 {
		t.Errorf("openai window %d, want 9110 (cached tokens count toward TPM)", got)
	}
}

func TestStreamWithoutUsageSaysItsOutputIsUnseen(t *testing.T) {
	// A stream cut before any usage settles what its chunks say it wrote at
	// least, and says so: the output window keeps the call's reserve.
	s := &streamUsage{kind: kindAnthropic, chunk: 12}
	u := s.settleUsage(gate.Ticket{Reserved: 1400, ReservedOutput: 400})
	if !u.OutputUnseen || u.OutputTokens != 12 || u.InputTokens != 1000 {
		t.Fatalf("usage %+v, want the input 1000, at least 12 output tokens, and the output unseen", u)
	}
	// Cut after message_start: its input is known, its output is not.
	started := &streamUsage{kind: kindAnthropic, seen: true, chunk: 5, u: gate.Usage{InputTokens: 12, OutputTokens: 1}}
	if u := started.settleUsage(gate.Ticket{Reserved: 1012, ReservedOutput: 1000}); !u.OutputUnseen || u.InputTokens != 12 || u.OutputTokens != 5 {
		t.Fatalf("usage %+v of a stream cut after message_start, want its input 12, at least 5 output tokens, and the output unseen", u)
	}
	seen := &streamUsage{kind: kindAnthropic, seen: true, final: true, u: gate.Usage{InputTokens: 900, OutputTokens: 300}}
	if u := seen.settleUsage(gate.Ticket{Reserved: 1400, ReservedOutput: 400}); u.OutputUnseen {
		t.Fatalf("usage %+v: a stream that stated its usage has seen its output", u)
	}
}
