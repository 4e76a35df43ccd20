package rules

import (
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine"
)

// Hint extraction: how long the provider asks us to wait, as it said it.
//
// The order (issue 3): headers first (they are the
// protocol), then fields of the body (retry_after_ms, retryDelay, ...), then prose
// ("Please try again in 644ms", "请在 30 秒后重试"). In prose, patterns with a unit
// are tried before bare numbers, so "after 1500 ms" is never read as 1500 seconds;
// separators between words are `[_\s-]*`, so "retry_after", "retry-after",
// "retry after" and a phrase broken across lines all match.
//
// A hint is never negative (a date in the past is a hint of 0: retry now), and it
// saturates at maxHintMs. Clamping to the configured window is the planner's job:
// see ClampHint.

// maxHintMs is where a hint saturates: ten years, far past any clamp.
const maxHintMs = 10 * 365 * 24 * 3600 * 1000

// ParseHint returns the wait hint in f, in milliseconds, as sent. now is the time
// an HTTP-date or RFC 3339 hint is measured from when f carries no Date header.
func ParseHint(f *engine.Failure, now time.Time) (ms int64, ok bool) {
	if f == nil {
		return 0, false
	}
	return parseHint(f, func() []cand { return findCands(f.Body) }, now)
}

// parseHint is ParseHint with the body's hint anchors found by cands (a rule
// evaluation has them already). The headers that state a wait come first;
// then the body's own wait, before the reset headers: a reset names when a
// bucket is full again (OpenAI's x-ratelimit-reset-tokens: "1m29.9s"), where
// the body says when this call fits ("Please try again in 483ms").
func parseHint(f *engine.Failure, cands func() []cand, now time.Time) (int64, bool) {
	if ms, ok := hintFromWaitHeaders(f.Header, now); ok {
		return ms, true
	}
	if ms, ok := hintFromBody(f.Body, cands(), headerDate(f.Header, now)); ok {
		return ms, true
	}
	return hintFromResetHeaders(f.Header, f.Status, now)
}

// ClampHint clamps a wait to [min, max]. A max below min is treated as min; a
// negative d is clamped to min (or 0 when min is not positive).
func ClampHint(d, min, max time.Duration) time.Duration {
	if min < 0 {
		min = 0
	}
	if max < min {
		max = min
	}
	if d < min {
		return min
	}
	if d > max {
		return max
	}
	return d
}

// ParseDuration reads a duration the way providers write them and returns it in
// milliseconds: Go's form ("6m0s", "12ms", "1.984999999s"), words ("30 seconds",
// "2 minutes and 5 seconds"), Chinese units ("30秒", "1分30秒") and a bare number,
// which counts as seconds (Retry-After's unit). ok is false when s holds no
// duration (or holds more than a duration).
func ParseDuration(s string) (ms int64, ok bool) {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), `"'`))
	if s == "" {
		return 0, false
	}
	v, end, _, ok := parseDurationAt(lowerString(s), 0, 1000)
	if !ok || strings.TrimSpace(strings.TrimRight(s[end:], ".")) != "" {
		return 0, false
	}
	return toMs(v), true
}

func toMs(v float64) int64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= maxHintMs:
		return maxHintMs
	}
	return int64(math.Round(v))
}

// lowerString lowercases ASCII letters only (bytes of other scripts are kept),
// so byte offsets do not move.
func lowerString(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				b[j] = lowerASCII(b[j])
			}
			return string(b)
		}
	}
	return s
}

// ---- durations ----

type unitDef struct {
	name string
	ms   float64
}

// units, longest first within a shared prefix so that "ms" wins over "m" and
// "minutes" over "min".
var units = []unitDef{
	{"milliseconds", 1}, {"millisecond", 1}, {"millis", 1}, {"msecs", 1}, {"msec", 1}, {"ms", 1},
	{"microseconds", 0.001}, {"us", 0.001}, {"µs", 0.001}, {"ns", 0.000001},
	{"seconds", 1000}, {"second", 1000}, {"secs", 1000}, {"sec", 1000}, {"s", 1000},
	{"minutes", 60000}, {"minute", 60000}, {"mins", 60000}, {"min", 60000}, {"m", 60000},
	{"hours", 3600000}, {"hour", 3600000}, {"hrs", 3600000}, {"hr", 3600000}, {"h", 3600000},
	{"days", 86400000}, {"day", 86400000}, {"d", 86400000},
	{"毫秒", 1}, {"秒钟", 1000}, {"秒", 1000}, {"分钟", 60000}, {"分", 60000},
	{"小时", 3600000}, {"个小时", 3600000}, {"天", 86400000},
}

// unitAt returns the unit that starts at s[i] (and ends on a word boundary).
func unitAt(s string, i int) (unitDef, int, bool) {
	for _, u := range units {
		if strings.HasPrefix(s[i:], u.name) {
			end := i + len(u.name)
			if end < len(s) && u.name[0] < 0x80 && isLetter(s[end]) {
				continue // "5 sessions" is not "5 s"
			}
			return u, end, true
		}
	}
	return unitDef{}, i, false
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

// numberAt reads an unsigned decimal number at s[i].
func numberAt(s string, i int) (float64, int, bool) {
	j := i
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j == i {
		return 0, i, false
	}
	if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		j++
		for j < len(s) && isDigit(s[j]) {
			j++
		}
	}
	if j < len(s) && (isDigit(s[j]) || isLetter(s[j]) && !startsUnit(s, j)) {
		return 0, i, false // "4o", "v1", "123abc"
	}
	v, err := strconv.ParseFloat(s[i:j], 64)
	if err != nil || math.IsInf(v, 0) {
		v = maxHintMs
	}
	return v, j, true
}

func startsUnit(s string, j int) bool {
	_, _, ok := unitAt(s, j)
	return ok
}

func skipSpaces(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// parseDurationAt reads a duration that starts at s[i]: one or more
// number+unit parts ("9m38.016s", "2 minutes and 5 seconds", "1分30秒"), or one
// bare number counted in defUnit milliseconds. It returns the value in
// milliseconds, where it ends, and whether a unit was given.
func parseDurationAt(s string, i int, defUnit float64) (ms float64, end int, hadUnit bool, ok bool) {
	total := 0.0
	pos := i
	for part := 0; ; part++ {
		j := pos
		if part > 0 {
			j = skipSpaces(s, j)
			if strings.HasPrefix(s[j:], "and ") {
				j = skipSpaces(s, j+4)
			} else if j < len(s) && s[j] == ',' {
				j = skipSpaces(s, j+1)
			}
		}
		v, k, okNum := numberAt(s, j)
		if !okNum {
			break
		}
		u, k2, okUnit := unitAt(s, skipSpaces(s, k))
		if !okUnit {
			if part == 0 {
				// A bare number, unless it is part of a date or a time.
				if k < len(s) && (s[k] == '-' || s[k] == ':' || s[k] == '/') {
					return 0, i, false, false
				}
				return toFloatMs(v * defUnit), k, false, true
			}
			break
		}
		total += v * u.ms
		pos, hadUnit = k2, true
	}
	if !hadUnit {
		return 0, i, false, false
	}
	return toFloatMs(total), pos, true, true
}

func toFloatMs(v float64) float64 {
	if v > maxHintMs || math.IsInf(v, 0) {
		return maxHintMs
	}
	return v
}

// ---- headers ----

// resetPair names a reset header and the remaining-count header of the same limit.
type resetPair struct{ reset, remaining, limit string }

var durationResets = []resetPair{
	{"x-ratelimit-reset-requests", "x-ratelimit-remaining-requests", "x-ratelimit-limit-requests"},
	{"x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens"},
	{"x-rate-limit-reset-requests", "x-rate-limit-remaining-requests", "x-rate-limit-limit-requests"},
	{"x-rate-limit-reset-tokens", "x-rate-limit-remaining-tokens", "x-rate-limit-limit-tokens"},
}

var anthropicResets = []resetPair{
	{"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-limit"},
	{"anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-limit"},
	{"anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-limit"},
	{"anthropic-ratelimit-output-tokens-reset", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-limit"},
}

var genericResets = []resetPair{
	{"x-ratelimit-reset", "x-ratelimit-remaining", "x-ratelimit-limit"},
	{"ratelimit-reset", "ratelimit-remaining", "ratelimit-limit"},
	{"x-ratelimit-reset-after", "x-ratelimit-remaining", "x-ratelimit-limit"},
}

// headerDate is the response's Date header, or now.
func headerDate(header func(string) string, now time.Time) time.Time {
	if d := header("date"); d != "" {
		if t, err := http.ParseTime(strings.TrimSpace(d)); err == nil {
			return t
		}
	}
	return now
}

// hintFromWaitHeaders reads the headers that state a wait: retry-after-ms
// (and Azure's x-ms-), then Retry-After in seconds or as an HTTP-date. A
// negative millisecond value is no statement, not a wait of 0.
func hintFromWaitHeaders(header func(string) string, now time.Time) (int64, bool) {
	for _, name := range []string{"retry-after-ms", "x-ms-retry-after-ms"} {
		if v := strings.TrimSpace(header(name)); v != "" {
			if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && f >= 0 {
				return toMs(f), true
			}
		}
	}
	if v := strings.TrimSpace(header("retry-after")); v != "" {
		if ms, ok := ParseDuration(v); ok {
			return ms, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return toMs(float64(t.Sub(headerDate(header, now)).Milliseconds())), true
		}
	}
	return 0, false
}

// hintFromResetHeaders reads the rate-limit reset headers. They describe when
// a bucket refills, which is a wait only when that bucket is empty: they count
// when their remaining header says 0, or when the status is 429.
func hintFromResetHeaders(header func(string) string, status int, now time.Time) (int64, bool) {
	base := headerDate(header, now)
	if ms, ok := pickReset(durationResets, header, status, func(v string) (int64, bool) {
		return resetValue(v, base)
	}); ok {
		return ms, true
	}
	if ms, ok := pickReset(anthropicResets, header, status, func(v string) (int64, bool) {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			return 0, false
		}
		return toMs(float64(t.Sub(base).Milliseconds())), true
	}); ok {
		return ms, true
	}
	return pickReset(genericResets, header, status, func(v string) (int64, bool) {
		return resetValue(v, base)
	})
}

// resetValue reads a reset header: a duration ("6m0s", "55", "1.5s"), or an
// epoch timestamp in seconds or milliseconds (OpenRouter, GitHub style).
func resetValue(v string, base time.Time) (int64, bool) {
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 1e9 {
		var t time.Time
		if f > 1e12 {
			t = time.UnixMilli(int64(f))
		} else {
			t = time.Unix(int64(f), 0)
		}
		return toMs(float64(t.Sub(base).Milliseconds())), true
	}
	return ParseDuration(v)
}

// pickReset returns the longest wait among the reset headers whose bucket is
// known to be empty; on a 429 with none known empty, the wait of the bucket
// with the least of its limit left (the one that refused: a per-minute token
// bucket at 63 of 40,000, not a per-day request bucket at 57 of 200 whose
// reset is 17 hours off), or the longest when no remaining and limit say.
func pickReset(pairs []resetPair, header func(string) string, status int, parse func(string) (int64, bool)) (int64, bool) {
	var best, bestAny, bestLeast int64 = -1, -1, -1
	least := math.Inf(1)
	for _, p := range pairs {
		v := header(p.reset)
		if v == "" {
			continue
		}
		ms, ok := parse(v)
		if !ok {
			continue
		}
		rem := strings.TrimSpace(header(p.remaining))
		if rem == "0" {
			best = max(best, ms)
		}
		bestAny = max(bestAny, ms)
		r, errR := strconv.ParseFloat(rem, 64)
		l, errL := strconv.ParseFloat(strings.TrimSpace(header(p.limit)), 64)
		if errR == nil && errL == nil && l > 0 && r >= 0 {
			if share := r / l; share < least || (share == least && ms > bestLeast) {
				least, bestLeast = share, ms
			}
		}
	}
	switch {
	case best >= 0:
		return best, true
	case status != 429:
	case bestLeast >= 0:
		return bestLeast, true
	case bestAny >= 0:
		return bestAny, true
	}
	return 0, false
}

// ---- body ----

// hintAnchors are the literals the body search starts from, squashed (so
// "x-ratelimit-reset" and "x-rate-limit-reset" are one anchor). A rule set puts
// them in its phrase automaton, which reports where each occurs; the search then
// reads only small windows of the body around them.
var hintAnchors = []string{"retry", "again", "after", "wait", "reset", "available", "xratelimitreset",
	"后", "等待", "等候", "稍等", "请在", "请于", "间隔", "冷却"}

// cand is one occurrence of a hint anchor: the body from pos (where the anchor
// starts) is where the search looks.
type cand struct {
	anchor string // an element of hintAnchors
	pos    int
}

// findCands lists the anchors of s in order of position, by plain search (the
// path that has no phrase automaton: ParseHint, hintIn).
func findCands(s string) []cand {
	lower := lowerString(s)
	var out []cand
	add := func(anchor, lit string) {
		for off := 0; len(out) < maxCands; {
			i := strings.Index(lower[off:], lit)
			if i < 0 {
				return
			}
			out = append(out, cand{anchor, off + i})
			off += i + len(lit)
		}
	}
	for _, a := range hintAnchors {
		if a == "xratelimitreset" {
			add(a, "x-ratelimit-reset")
			add(a, "x-rate-limit-reset")
		}
		add(a, a)
	}
	slices.SortStableFunc(out, func(a, b cand) int { return a.pos - b.pos })
	return out
}

// maxCands bounds the anchors a body is searched at.
const maxCands = 256

// window returns body[from:to] (clipped), ASCII-lowercased.
func window(body string, from, to int) string {
	return lowerString(body[max(0, from):min(len(body), to)])
}

// hintFromBody reads body fields, then prose, at the anchors found in body.
func hintFromBody(body string, cands []cand, base time.Time) (int64, bool) {
	if ms, ok := hintFromFields(body, cands, base); ok {
		return ms, true
	}
	return hintFromProse(body, cands)
}

// fieldRE matches a hint key (from its first byte) up to its value. The quotes
// around the key and the value may be escaped, once or more: an error object
// serialised into a string field of another one (Google's RetryInfo inside an
// SDK's or a gateway's "message") reads `\"retryDelay\": \"26s\"`.
var fieldRE = regexp.MustCompile(`^(?:retry[_-]?after[_-]?(ms|millis|milliseconds|seconds|secs?|s)?|retry[_-]?delay[_-]?(ms|seconds|secs?)?|retry[_-]?in[_-]?(ms|seconds|secs?)?|x-?rate-?limit-?reset(?:-requests|-tokens|-after)?)(?:\\*["'])?[ \t]*[:=][ \t]*(?:\\*["'])?`)

func hintFromFields(body string, cands []cand, base time.Time) (int64, bool) {
	for _, c := range cands {
		if c.anchor != "retry" && c.anchor != "xratelimitreset" {
			continue
		}
		p := c.pos
		if p > 0 && (isAlnum(body[p-1]) || body[p-1] == '_') {
			continue // "totalRetryDelay" is not "retryDelay"
		}
		w := window(body, p, p+96)
		m := fieldRE.FindStringSubmatchIndex(w)
		if m == nil {
			continue
		}
		suffix := ""
		for g := 1; g <= 3; g++ {
			if m[2*g] >= 0 {
				suffix = w[m[2*g]:m[2*g+1]]
			}
		}
		def := 1000.0
		if suffix == "ms" || suffix == "millis" || suffix == "milliseconds" {
			def = 1
		}
		if c.anchor == "xratelimitreset" {
			end := m[1]
			for end < len(w) && (isDigit(w[end]) || w[end] == '.' || isLetter(w[end])) {
				end++
			}
			if ms, ok := resetValue(w[m[1]:end], base); ok {
				return ms, true
			}
			continue
		}
		if v, _, _, ok := parseDurationAt(w, m[1], def); ok {
			return toMs(v), true
		}
	}
	return 0, false
}

// Prose anchors: each regexp is tried where its literal occurs and matches up to
// where the duration starts.
var (
	proseRetryRE = regexp.MustCompile(`^retry[_\s-]*(?:after|in)[_\s-]*(?:about|approximately|approx\.?|~|at[_\s-]*least)?[_\s-]*(?:[:=][_\s]*)?`)
	proseAgainRE = regexp.MustCompile(`^again[_\s-]*(?:in|after)[_\s-]*(?:about|approximately|approx\.?|~|at[_\s-]*least)?[_\s-]*(?:[:=][_\s]*)?`)
	proseAfterRE = regexp.MustCompile(`^after[_\s-]*(?:about|approximately|approx\.?|~|at[_\s-]*least)?[_\s-]*(?:[:=][_\s]*)?`)
	proseWaitRE  = regexp.MustCompile(`^wait(?:ing)?[_\s-]*(?:for)?[_\s-]*(?:about|approximately|approx\.?|~|at[_\s-]*least)?[_\s-]*(?:[:=][_\s]*)?`)
	proseResetRE = regexp.MustCompile(`^resets?[_\s-]*(?:in|after)[_\s-]*(?:about|approximately|~)?[_\s-]*`)
	proseAvailRE = regexp.MustCompile(`^available[_\s-]*(?:again[_\s-]*)?in[_\s-]*(?:about|approximately|~)?[_\s-]*`)
	// Chinese: "30 秒后", "请在 1分30秒 之后重试", "请等待 30 秒".
	proseZhAfterRE = regexp.MustCompile(`(\d+(?:\.\d+)?\s*(?:小时|个小时|分钟|分|秒钟|秒|毫秒|ms|s|sec|seconds?|mins?|minutes?)\s*)+(?:之|以)?后$`)
	proseZhWaitRE  = regexp.MustCompile(`^(?:等待|等候|稍等|请在|请于|间隔|冷却)\s*`)
)

// proseAnchors maps an anchor to the regexp tried at it and whether a bare
// number after it counts (as seconds).
var proseAnchors = map[string]struct {
	re   *regexp.Regexp
	bare bool
}{
	"retry":     {proseRetryRE, true},
	"again":     {proseAgainRE, true},
	"after":     {proseAfterRE, false},
	"wait":      {proseWaitRE, false},
	"reset":     {proseResetRE, false},
	"available": {proseAvailRE, false},
}

// hintFromProse takes the earliest unit-qualified hint in the prose; failing
// that, the earliest bare number after "retry after"/"try again in".
func hintFromProse(body string, cands []cand) (int64, bool) {
	bare, bareMs := false, int64(0)
	for _, c := range cands {
		p := c.pos
		switch c.anchor {
		case "后":
			w := window(body, p-48, p+len("后"))
			if m := proseZhAfterRE.FindStringIndex(w); m != nil {
				if v, _, hadUnit, ok := parseDurationAt(w, m[0], 1000); ok && hadUnit {
					return toMs(v), true
				}
			}
		case "等待", "等候", "稍等", "请在", "请于", "间隔", "冷却":
			w := window(body, p, p+48)
			if m := proseZhWaitRE.FindStringIndex(w); m != nil {
				if v, _, hadUnit, ok := parseDurationAt(w, m[1], 1000); ok && hadUnit {
					return toMs(v), true
				}
			}
		default:
			a, ok := proseAnchors[c.anchor]
			if !ok {
				continue
			}
			if p > 0 && isLetter(body[p-1]) {
				continue // "overwait", "thereafter"
			}
			w := window(body, p-12, p+96)
			off := p - max(0, p-12)
			if clientBackoff(w, off) {
				continue
			}
			m := a.re.FindStringIndex(w[off:])
			if m == nil {
				continue
			}
			v, _, hadUnit, ok := parseDurationAt(w, off+m[1], 1000)
			switch {
			case !ok:
			case hadUnit:
				return toMs(v), true
			case a.bare && !bare && bareEnds(w, off+m[1]):
				bare, bareMs = true, toMs(v)
			}
		}
	}
	return bareMs, bare
}

// clientBackoff reports whether the anchor at w[p:] is part of a client's own
// backoff log ("Retrying in 1 seconds… (attempt 1/10)"), which is not a hint.
func clientBackoff(w string, p int) bool {
	if strings.HasPrefix(w[p:], "retrying") || strings.HasPrefix(w[p:], "retried") {
		return true
	}
	before := w[:p]
	return strings.Contains(before, "retrying") || strings.Contains(before, "retried")
}

// bareEnds reports whether a bare number at i ends a clause: not followed by a
// word ("retry after 3 attempts") or a percent or another number.
func bareEnds(w string, i int) bool {
	_, j, ok := numberAt(w, i)
	if !ok {
		return false
	}
	j = skipSpaces(w, j)
	if j >= len(w) {
		return true
	}
	c := w[j]
	return !isLetter(c) && c != '%' && !isDigit(c) && c != '/' && c < 0x80
}
