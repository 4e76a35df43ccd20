package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gatectl/gatectl/engine/gate"
)

// wireUsage is the union of the usage objects the APIs report:
//
//   - OpenAI chat/completions/embeddings: prompt_tokens (cached tokens counted
//     within it, in prompt_tokens_details.cached_tokens) and completion_tokens;
//   - OpenAI responses: input_tokens (cached within, input_tokens_details) and
//     output_tokens;
//   - Anthropic messages: input_tokens (cache reads and writes not included),
//     cache_read_input_tokens, cache_creation_input_tokens, output_tokens.
type wireUsage struct {
	PromptTokens     int64          `json:"prompt_tokens"`
	CompletionTokens int64          `json:"completion_tokens"`
	PromptDetails    *cachedDetails `json:"prompt_tokens_details"`
	InputTokens      int64          `json:"input_tokens"`
	OutputTokens     int64          `json:"output_tokens"`
	InputDetails     *cachedDetails `json:"input_tokens_details"`
	CacheRead        int64          `json:"cache_read_input_tokens"`
	CacheCreation    int64          `json:"cache_creation_input_tokens"`
}

type cachedDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// toEngine converts to the ledger's usage: every token the provider counts,
// cache reads and writes apart, none counted twice. Anthropic's input limit
// (ITPM) counts input_tokens and cache writes but not cache reads, for every
// current model: there they stay out of the window (gate.Usage). Counted, an
// agent whose input is mostly cache reads got a fraction of its capacity.
// OpenAI counts cached tokens toward TPM.
func (u *wireUsage) toEngine(kind apiKind) gate.Usage {
	if kind == kindAnthropic {
		return gate.Usage{InputTokens: u.InputTokens, CacheReadTokens: u.CacheRead, CacheWriteTokens: u.CacheCreation,
			OutputTokens: u.OutputTokens, CacheReadsUncounted: true}
	}
	if u.PromptTokens > 0 || u.CompletionTokens > 0 {
		var cached int64
		if u.PromptDetails != nil {
			cached = min(u.PromptDetails.CachedTokens, u.PromptTokens)
		}
		return gate.Usage{InputTokens: u.PromptTokens - cached, CacheReadTokens: cached, OutputTokens: u.CompletionTokens}
	}
	var cached int64
	if u.InputDetails != nil {
		cached = min(u.InputDetails.CachedTokens, u.InputTokens)
	}
	return gate.Usage{InputTokens: u.InputTokens - cached, CacheReadTokens: cached, OutputTokens: u.OutputTokens}
}

// bodyInfo is what gatectl reads from a non-streaming response body.
type bodyInfo struct {
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// inspectBody reads a complete JSON response: its usage, and whether it is an
// error dressed as a success (HTTP 200 with {"error": …}).
func inspectBody(kind apiKind, body []byte) (u gate.Usage, hasUsage, isError bool) {
	var bi bodyInfo
	if err := json.Unmarshal(body, &bi); err != nil {
		return u, false, false // not JSON: passed on as it is
	}
	if len(bi.Error) > 0 && !bytes.Equal(bi.Error, []byte("null")) {
		return u, false, true
	}
	if bi.Usage == nil {
		return u, false, false
	}
	return bi.Usage.toEngine(kind), true, false
}

// sseEvent is one server-sent event as received: raw holds its bytes, the blank
// line that ends it included, so that it is passed on exactly.
type sseEvent struct {
	raw  []byte
	name []byte // the event: field, nil when absent
	data []byte // the data: fields joined by "\n"
}

// maxStreamEvent bounds one event of a stream, as maxResponseBody bounds a whole
// non-streaming body: an upstream that sends more without ending the event is a
// transport failure, not memory gatectl holds without limit. A var for tests.
var maxStreamEvent = maxResponseBody

// errEventTooLarge: a stream event over maxStreamEvent.
var errEventTooLarge = errors.New("a stream event is too large")

// sseReader splits a stream into events without buffering more than one.
type sseReader struct {
	r    *bufio.Reader
	raw  []byte
	data []byte
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 16<<10)} }

// next returns the next event. At the end of the stream it returns io.EOF, or
// io.ErrUnexpectedEOF when the stream stopped inside an event. The event's slices
// are valid until the next call.
func (s *sseReader) next() (sseEvent, error) {
	s.raw, s.data = s.raw[:0], s.data[:0]
	var ev sseEvent
	nameAt, nameLen := -1, 0
	hasData := false
	for {
		line, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// a line longer than the buffer: gather it whole
			start := len(s.raw)
			s.raw = append(s.raw, line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(s.raw) > maxStreamEvent {
					return ev, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, maxStreamEvent)
				}
				line, err = s.r.ReadSlice('\n')
				s.raw = append(s.raw, line...)
			}
			line = s.raw[start:]
			s.raw = s.raw[:start]
		}
		if len(line) == 0 && err != nil {
			if len(s.raw) > 0 {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				ev.raw = s.raw
				return ev, err
			}
			return ev, err
		}
		start := len(s.raw)
		s.raw = append(s.raw, line...)
		if len(s.raw) > maxStreamEvent {
			return ev, fmt.Errorf("%w (over %d bytes)", errEventTooLarge, maxStreamEvent)
		}
		content := bytes.TrimRight(s.raw[start:], "\r\n")
		switch {
		case len(content) == 0:
			if start == 0 { // blank lines between events: skip
				s.raw = s.raw[:0]
				if err != nil {
					return ev, err
				}
				continue
			}
			ev.raw = s.raw
			if nameAt >= 0 {
				ev.name = s.raw[nameAt : nameAt+nameLen]
			}
			if hasData {
				ev.data = s.data
			}
			return ev, nil
		case bytes.HasPrefix(content, []byte("data:")):
			v := bytes.TrimPrefix(content[5:], []byte(" "))
			if hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, v...)
			hasData = true
		case bytes.HasPrefix(content, []byte("event:")):
			v := bytes.TrimPrefix(content[6:], []byte(" "))
			nameAt, nameLen = start+(len(content)-len(v)), len(v)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			ev.raw = s.raw
			return ev, err
		}
	}
}

// streamUsage follows the usage a stream reports, per API.
type streamUsage struct {
	kind apiKind
	u    gate.Usage
	seen bool
	// final: the usage read is the stream's last word (Anthropic's
	// message_start states the input and one output token; its message_delta
	// the output written).
	final bool
	// ended: the stream's own last word came — OpenAI's [DONE] or a choice's
	// finish_reason, a Responses terminal event, Anthropic's message_delta
	// or message_stop. A stream whose body ends cleanly without it was cut
	// (a gateway that closed it early): not a complete answer.
	ended bool
	chunk int64 // content events passed on, for settling a cut stream without usage
}

var (
	evMessageStart      = []byte("message_start")
	evMessageDelta      = []byte("message_delta")
	evMessageStop       = []byte("message_stop")
	evMessage           = []byte("message") // the SSE default name: as good as none
	keyResponseEnded    = [][]byte{[]byte(`"response.completed"`), []byte(`"response.failed"`), []byte(`"response.incomplete"`)}
	keyFinishReason     = []byte(`"finish_reason"`)
	evError             = []byte("error")
	evResponseCompleted = []byte("response.completed")
	evResponseFailed    = []byte("response.failed")
	evResponseInc       = []byte("response.incomplete")
	dataDone            = []byte("[DONE]")
	keyUsage            = []byte(`"usage"`)
	keyError            = []byte(`"error"`)
)

// observe reads one event's usage and says whether the event is an error, and
// whether it is OpenAI's usage-only chunk (no choices), which gatectl asked for.
func (s *streamUsage) observe(ev *sseEvent) (isError, usageOnly bool) {
	switch s.kind {
	case kindAnthropic:
		switch {
		case bytes.Equal(ev.name, evError):
			return true, false
		case bytes.Equal(ev.name, evMessageStart):
			var m struct {
				Message struct {
					Usage *wireUsage `json:"usage"`
				} `json:"message"`
			}
			if json.Unmarshal(ev.data, &m) == nil && m.Message.Usage != nil {
				s.u = m.Message.Usage.toEngine(kindAnthropic)
				s.seen = true
			}
		case bytes.Equal(ev.name, evMessageDelta):
			var m struct {
				Usage *wireUsage `json:"usage"`
			}
			if json.Unmarshal(ev.data, &m) == nil && m.Usage != nil {
				// message_delta's counts are cumulative; input counts, when present,
				// restate message_start's.
				d := m.Usage.toEngine(kindAnthropic)
				s.u.OutputTokens = max(s.u.OutputTokens, d.OutputTokens)
				s.u.InputTokens = max(s.u.InputTokens, d.InputTokens)
				s.u.CacheReadTokens = max(s.u.CacheReadTokens, d.CacheReadTokens)
				s.u.CacheWriteTokens = max(s.u.CacheWriteTokens, d.CacheWriteTokens)
				s.seen, s.final = true, true
			}
			s.ended = true
		case bytes.Equal(ev.name, evMessageStop):
			s.ended = true
		default:
			s.chunk++
		}
		return false, false
	}
	// OpenAI: chat/completions and completions send data-only chunks; responses
	// sends named events.
	if len(ev.name) > 0 && !bytes.Equal(ev.name, evMessage) {
		switch {
		case bytes.Equal(ev.name, evError):
			return true, false
		case bytes.Equal(ev.name, evResponseCompleted), bytes.Equal(ev.name, evResponseFailed), bytes.Equal(ev.name, evResponseInc):
			var m struct {
				Response struct {
					Usage *wireUsage `json:"usage"`
				} `json:"response"`
			}
			if json.Unmarshal(ev.data, &m) == nil && m.Response.Usage != nil {
				s.u, s.seen, s.final = m.Response.Usage.toEngine(kindOpenAI), true, true
			}
			s.ended = true
			// A response that failed is an error event too, classified as any
			// (its error may be a rate limit: the model then cools down).
			return bytes.Equal(ev.name, evResponseFailed), false
		default:
			s.chunk++
		}
		return false, false
	}
	if ev.data == nil {
		return false, false
	}
	if bytes.Equal(bytes.TrimSpace(ev.data), dataDone) {
		s.ended = true
		return false, false
	}
	if finishes(ev.data) || responseEnded(ev.data) {
		s.ended = true // (the chunk is read on below)
	}
	hasUsage, hasErr := bytes.Contains(ev.data, keyUsage), bytes.Contains(ev.data, keyError)
	if !hasUsage && !hasErr {
		s.chunk++
		return false, false
	}
	var m struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *wireUsage        `json:"usage"`
		Error   json.RawMessage   `json:"error"`
	}
	if json.Unmarshal(ev.data, &m) != nil {
		s.chunk++
		return false, false
	}
	if len(m.Error) > 0 && !bytes.Equal(m.Error, []byte("null")) {
		return true, false
	}
	if m.Usage != nil {
		s.u, s.seen, s.final = m.Usage.toEngine(kindOpenAI), true, true
		return false, len(m.Choices) == 0
	}
	s.chunk++
	return false, false
}

// finishes says whether an OpenAI chunk gives a choice's finish_reason: a
// string that is not empty, not null (whatever the spacing around the colon;
// some servers send "" on every chunk before the last). Each choice's is read.
func finishes(data []byte) bool {
	for {
		i := bytes.Index(data, keyFinishReason)
		if i < 0 {
			return false
		}
		data = data[i+len(keyFinishReason):]
		rest := bytes.TrimLeft(data, " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if len(rest) > 1 && rest[0] == '"' && rest[1] != '"' {
			return true
		}
	}
}

// responseEnded says whether a Responses event sent without its name (the
// type in its data alone) is a terminal one. (A quote inside a JSON string is
// escaped: these can only be the event's own type.)
func responseEnded(data []byte) bool {
	for _, k := range keyResponseEnded {
		if bytes.Contains(data, k) {
			return true
		}
	}
	return false
}

// failureBodyOf is what a stream's error event is classified on. OpenAI's
// response.failed repeats the whole response — the caller's instructions, the
// output so far — whose words are not the provider's ("…if you hit a rate
// limit, wait" read as a rate limit, and its cooldown and learning would
// follow): only its error goes, as {"error": …}. Any other error event whole.
func failureBodyOf(ev *sseEvent) []byte {
	if !bytes.Equal(ev.name, evResponseFailed) {
		return ev.data
	}
	var m struct {
		Response struct {
			Error json.RawMessage `json:"error"`
		} `json:"response"`
	}
	if json.Unmarshal(ev.data, &m) != nil || len(m.Response.Error) == 0 {
		return []byte(`{}`)
	}
	return append(append([]byte(`{"error":`), m.Response.Error...), '}')
}

// settleUsage is what to settle a stream with: the usage it reported, else (a
// stream cut before its usage) the input estimate plus one token per content
// event passed on. An Anthropic stream cut after message_start (a client that
// hung up, an error mid-way) reported its input but not what it wrote: at
// least one token per content event then. Settled at message_start's one
// token, the window read lighter than the provider's, which counted what was
// written, and let the next calls into a 429. Its output is unseen too: a
// content event carries several tokens, and the output window keeps the
// call's reserve (gate.Usage.OutputUnseen), as for a stream cut before any
// usage.
func (s *streamUsage) settleUsage(t gate.Ticket) gate.Usage {
	if s.seen {
		u := s.u
		if !s.final {
			u.OutputTokens = max(u.OutputTokens, s.chunk)
			u.OutputUnseen = true
		}
		return u
	}
	return gate.Usage{InputTokens: max(t.Reserved-t.ReservedOutput, 0), OutputTokens: s.chunk, OutputUnseen: true}
}
