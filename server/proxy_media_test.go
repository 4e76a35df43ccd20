package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inline is n bytes of base64, as an image's data is.
func inline(n int) string {
	return base64.StdEncoding.EncodeToString(make([]byte, n*3/4))
}

// Each face's inline media is counted as mediaItemBytes, not its base64 text;
// text, URLs and a word "base64" in a message are counted as they are.
func TestInputSizeCountsInlineMediaAsItems(t *testing.T) {
	img := inline(300 << 10)
	png, pdf := "data:image/png;base64,"+img, "data:application/pdf;base64,"+img
	cases := []struct {
		name, body string
		media      []string // the media strings, each counted as an item
	}{
		{"anthropic image", `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + img + `"}},{"type":"text","text":"what is it?"}]}]}`, []string{img}},
		{"anthropic pdf in a tool result", `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + img + `"}}]}]}]}`, []string{img}},
		{"chat image_url", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + png + `"}},{"type":"image_url","image_url":{"url":"` + png + `","detail":"high"}}]}]}`, []string{png, png}},
		{"chat file", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"` + pdf + `"}}]}]}`, []string{pdf}},
		{"responses input_image and input_file", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + png + `"},{"type":"input_file","filename":"a.pdf","file_data":"` + pdf + `"}]}]}`, []string{png, pdf}},
		{"text that says base64", `{"model":"m","messages":[{"role":"user","content":"decode this base64: ` + img + `"}]}`, nil},
		{"image by URL", `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},{"type":"text","text":"base64?"}]}]}`, nil},
		{"plain text", `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, nil},
	}
	for _, c := range cases {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(c.body), &fields); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := len(c.body)
		for _, m := range c.media {
			want += mediaItemBytes - len(m) - 2 // with its quotes
		}
		if got := inputSize([]byte(c.body), fields); got != want {
			t.Errorf("%s: size %d, want %d", c.name, got, want)
		}
	}
}

// One inline image on a model must not make the text requests after it wait:
// counted at its base64 size, a 300 KB image that costs 1,600 tokens taught
// the gate ~190 bytes a token, each 20 KB text request after it was estimated
// at a twentieth of its input, and the input error widened the margin past
// the 20k window — each waited a minute (here: answered 429 at its 1 s hold).
func TestProxyInlineImageDoesNotStarveTextRequests(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		n := int(r.ContentLength) // (the body was read by the fake already)
		in := n / 4
		if n > 100<<10 {
			in = 1600 // an image's real cost
		}
		jsonAnswer(200, fmt.Sprintf(`{"type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":%d,"output_tokens":7}}`, in))(w, r)
	})
	cfg := streamConfig(up.URL, up.URL) + "gate:\n  models:\n    anth/img: {tpm: 20000, rpm: 600}\n"
	f := newPxFixture(t, cfg, true)
	image := map[string]any{"model": "anth/img", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": inline(300 << 10)}}}}}}
	resp, body := f.call("/v1/messages", image)
	if resp.StatusCode != 200 {
		t.Fatalf("image: %d %s", resp.StatusCode, body)
	}
	if bpt := f.status("anth", "img").BytesPerToken; bpt > 6 {
		t.Errorf("after the image the learned ratio is %.1f bytes a token, want about 4", bpt)
	}
	text := map[string]any{"model": "anth/img", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": strings.Repeat("word ", 4000)}}}
	for i := range 3 {
		f.clock.Advance(10 * time.Second) // past the pacing that spreads 5k-token calls over a 20k window
		resp, body := f.call("/v1/messages", text, "X-Gate-Max-Wait", "1s")
		if resp.StatusCode != 200 {
			t.Fatalf("text %d after the image: %d %s", i, resp.StatusCode, body)
		}
		if w, _ := strconv.Atoi(resp.Header.Get("X-Gate-Waited-Ms")); w > 0 {
			t.Errorf("text %d waited %d ms", i, w)
		}
	}
}
