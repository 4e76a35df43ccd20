package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"
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

// marks reads every recorded mark.
func (s *Store) marks() map[string]time.Time {
	var all map[string]string
	if err := s.call(func(ctx context.Context) error {
		var err error
		all, err = s.c.HGetAll(ctx, s.marksKey()).Result()
		return err
	}); err != nil {
		return nil
	}
	out := make(map[string]time.Time, len(all))
	for p, v := range all {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[p] = time.UnixMilli(ms)
		}
	}
	return out
}

// dispatchMark hands another instance's mark to the handler.
func (s *Store) dispatchMark(payload string) {
	rest, ok := strings.CutPrefix(payload, "m ")
	if !ok || s.on.Marked == nil {
		return
	}
	parts := strings.SplitN(rest, " ", 3)
	if len(parts) != 3 || parts[0] == s.instance {
		return
	}
	if ms, err := strconv.ParseInt(parts[1], 10, 64); err == nil {
		s.on.Marked(parts[2], time.UnixMilli(ms))
	}
}
