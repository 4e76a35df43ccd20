package server

// The size a request's input is estimated from, with inline media left out.

import (
	"bytes"
	"encoding/json"
)

// mediaItemTokens is what one inline image or file counts as in the input
// estimate. Its base64 text says nothing of its cost: a 300 KB image costs
// Anthropic (width × height) ÷ 750 tokens, about 1,600 at most once it is
// scaled to its largest accepted size; OpenAI's high detail costs 85 + 170
// per 512-pixel tile, 765 for a 1024×1024 image and about 1,100 at its
// largest. 1,600 is the top of the common range, so an image is not
// under-estimated. A PDF costs per page (Anthropic: about 1,500 to 3,000 a
// page), which its bytes do not tell either: it counts as one item too, and
// the gate's learned input error covers the rest.
//
// Counted at its bytes, one image taught the gate's learned bytes-per-token
// ratio that 300 KB is 1,600 tokens: every text request after it on the model
// was estimated at a tenth of its input, the input error that followed widened
// the margin past the window, and each waited a minute.
const mediaItemTokens = 1600

// mediaItemBytes is an item's share of the request's size: its tokens at the
// gate's first-request heuristic of 4 bytes a token (engine/gate/estimate.go),
// so the learned ratio stays a text ratio.
const mediaItemBytes = mediaItemTokens * 4

// mediaScanDepth bounds how deep the scan looks: media sits at most six
// levels down (messages[i].content[j] of a tool_result, .content[k].source.data).
const mediaScanDepth = 10

var base64Word = []byte("base64")

// inputSize is the size the gate estimates a request's input from: the body's
// length, with each base64 media payload (Anthropic's source.type "base64";
// a data: URL in OpenAI's image_url, Responses' input_image or a file's
// file_data) replaced by mediaItemBytes. A body that never says "base64" is
// not scanned further: the ordinary text request pays one byte search.
func inputSize(body []byte, fields map[string]json.RawMessage) int {
	if !bytes.Contains(body, base64Word) {
		return len(body)
	}
	var s mediaScan
	for _, f := range [...]string{"messages", "input", "system"} {
		if raw, ok := fields[f]; ok {
			s.walk(raw, 0)
		}
	}
	return max(len(body)-s.payload+s.items*mediaItemBytes, 1)
}

// mediaScan sums the base64 media payloads found: their bytes and their count.
type mediaScan struct{ payload, items int }

func (s *mediaScan) walk(raw json.RawMessage, depth int) {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if depth > mediaScanDepth || len(raw) == 0 || !bytes.Contains(raw, base64Word) {
		return
	}
	switch raw[0] {
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return
		}
		for _, it := range items {
			s.walk(it, depth+1)
		}
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return
		}
		// Anthropic: {"type":"base64","media_type":…,"data":"…"}
		if t, d := obj["type"], obj["data"]; bytes.Equal(t, []byte(`"base64"`)) && len(d) > 0 && d[0] == '"' {
			s.payload += len(d)
			s.items++
			return
		}
		for k, v := range obj {
			if (k == "url" || k == "image_url" || k == "file_data") && isDataURL(v) {
				s.payload += len(v)
				s.items++
				continue
			}
			s.walk(v, depth+1)
		}
	}
}

// isDataURL says whether a raw JSON value is a base64 data: URL string.
func isDataURL(v json.RawMessage) bool {
	if !bytes.HasPrefix(v, []byte(`"data:`)) {
		return false
	}
	head := v[:min(len(v), 256)] // the media type comes first, before the payload
	return bytes.Contains(head, []byte(";base64,"))
}
