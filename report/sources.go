package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

// FromGate is e as the report counts it.
func FromGate(e gate.Event) Event {
	return Event{Kind: string(e.Kind), At: e.At, Model: e.Provider + "/" + e.Model, Reason: e.Reason,
		Wait: e.Wait, TokenBudget: e.TokenBudget, Step: e.Step,
		From: int64(e.From), To: int64(e.To), Quota: int64(e.Quota), Trigger: int64(e.Trigger)}
}

// maxLogLine bounds one line of a log file; a longer one is skipped.
const maxLogLine = 1 << 20

// ReadLog feeds b the gate's lines of a JSON log (`log: {format: json}`): the
// lines whose "event" field names a gate event, timed by their "@timestamp".
// Other lines, lines that are not JSON (a text log mixed in) and lines longer
// than maxLogLine are skipped and counted. It returns how many gate lines it
// read and how many it skipped.
func ReadLog(b *Book, r io.Reader) (read, skipped int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, long, err := readLogLine(br)
		if long {
			skipped++
		} else if line = bytes.TrimSpace(line); len(line) > 0 {
			if e, ok := parseLogLine(line); !ok {
				skipped++
			} else if e.Kind != "" {
				b.Observe(e)
				read++
			}
		}
		if err == io.EOF {
			return read, skipped, nil
		}
		if err != nil {
			return read, skipped, fmt.Errorf("reading the log: %w", err)
		}
	}
}

// readLogLine returns the next line without its newline. A line longer than
// maxLogLine is read through and dropped (long=true): one huge line must not end
// the report, nor be held in memory whole.
func readLogLine(br *bufio.Reader) (line []byte, long bool, err error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(buf)+len(frag) > maxLogLine+1 { // +1: the newline
				long, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
		if err != bufio.ErrBufferFull {
			return bytes.TrimSuffix(buf, []byte("\n")), long, err
		}
	}
}

// parseLogLine decodes one hclog JSON line; ok=false when it is not JSON.
// A JSON line that is not a gate event comes back with an empty Kind.
func parseLogLine(line []byte) (Event, bool) {
	var m map[string]any
	if json.Unmarshal(line, &m) != nil {
		return Event{}, false
	}
	kind, _ := m["event"].(string)
	switch kind {
	case KindAdmitted, KindFailOpen, KindOverBudget, KindRateLimited, KindLearn, KindLeak, KindWait:
	default:
		return Event{}, true
	}
	e := Event{Kind: kind, Model: str(m["model"]), Reason: str(m["reason"])}
	if ts, ok := m["@timestamp"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			e.At = t
		}
	}
	e.Wait = time.Duration(num(m["wait_ms"])) * time.Millisecond
	e.TokenBudget = num(m["token_budget"])
	switch kind {
	case KindLearn:
		e.Step, e.From, e.To = str(m["step"]), num(m["from"]), num(m["to"])
		e.Quota, e.Trigger = num(m["quota"]), num(m["trigger"])
	case KindLeak:
		e.From, e.To = num(m["clean_window"]), num(m["trigger"])
	}
	return e, true
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// num reads a JSON number as an integer; anything else (such as "not
// observed") is 0.
func num(v any) int64 {
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return int64(f)
}
