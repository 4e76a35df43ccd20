package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exhaustion marks (a provider out of allowance after a QUOTA failure) are
// facts about a provider, not about one instance: every instance should route
// around it. They live in one hash, provider → when it was marked, refreshed
// with a TTL on every mark, and each mark is announced so the other instances
// adopt it at once; an instance that starts reads the hash (Notify).

// marksTTL bounds how long the marks hash outlives its last mark: longer than
// any sane exhaustedCooldown, after which a mark no longer holds anyway.
const marksTTL = 7 * 24 * time.Hour

func (s *Store) marksKey() string     { return s.opts.KeyPrefix + "{marks}" }
func (s *Store) marksChannel() string { return s.opts.KeyPrefix + "{marks}:ev" }

// ShareMark records that this instance marked provider exhausted at at.
func (s *Store) ShareMark(provider string, at time.Time) {
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	_ = s.call(func(ctx context.Context) error {
		p := s.c.Pipeline()
		p.HSet(ctx, s.marksKey(), provider, ms)
		p.PExpire(ctx, s.marksKey(), marksTTL)
		p.Publish(ctx, s.marksChannel(), "m "+s.instance+" "+ms+" "+provider)
		_, err := p.Exec(ctx)
		return err
	})
}

// ShareUnmark records that this instance lifted provider's mark by hand at at:
// the mark leaves the hash unless a later one replaced it meanwhile, and the
// other instances are told (a mark they set after at stands).
func (s *Store) ShareUnmark(provider string, at time.Time) {
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	_ = s.call(func(ctx context.Context) error {
		return unmarkScript.Run(ctx, s.c, []string{s.marksKey()}, provider, ms, s.marksChannel(), "u "+s.instance+" "+ms+" "+provider).Err()
	})
}

// unmarkScript: KEYS marks; ARGV provider at channel message. Drops provider's
// mark unless it was set after at, and announces the unmark.
var unmarkScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if cur <= tonumber(ARGV[2]) then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// marks reads every recorded mark.
func (s *Store) marks() map[string]time.Time { return s.timesIn(s.marksKey()) }

// dispatchMark hands another instance's mark ("m …") or unmark ("u …") to the handler.
func (s *Store) dispatchMark(payload string) {
	handler := s.on.Marked
	if len(payload) > 1 && payload[0] == 'u' {
		handler = s.on.Unmarked
	}
	if len(payload) < 2 || payload[1] != ' ' || (payload[0] != 'm' && payload[0] != 'u') || handler == nil {
		return
	}
	parts := strings.SplitN(payload[2:], " ", 3)
	if len(parts) != 3 || parts[0] == s.instance {
		return
	}
	if ms, err := strconv.ParseInt(parts[1], 10, 64); err == nil {
		handler(parts[2], time.UnixMilli(ms))
	}
}
