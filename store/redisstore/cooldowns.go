package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/redis/go-redis/v9"
)

// Provider-wide cooldowns (a 429 that names no model, or names one the gate
// cannot tell) belong to no model's window, so they live in one hash of their
// own, provider → the cooldown's end (ms), and each is announced so the other
// instances adopt it at once; an instance that starts reads the hash (Notify).
// The hash's TTL is stretched to the longest cooldown it holds, plus a second.

func (s *Store) cooldownsKey() string     { return s.opts.KeyPrefix + "{cooldowns}" }
func (s *Store) cooldownsChannel() string { return s.opts.KeyPrefix + "{cooldowns}:ev" }

// providerCooldownScript: KEYS hash; ARGV provider until ttl channel message.
// Extends provider's cooldown to until — a shorter one never shortens a longer
// one — and announces it when it moved.
var providerCooldownScript = redis.NewScript(`
local untilMs, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if untilMs <= cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], untilMs)
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`)

// ProviderCooldown implements gate.SharedProviderCooldowns.
func (s *Store) ProviderCooldown(provider string, now, until time.Time) error {
	ms := strconv.FormatInt(until.UnixMilli(), 10)
	return s.call(func(ctx context.Context) error {
		return providerCooldownScript.Run(ctx, s.c, []string{s.cooldownsKey()}, provider, ms,
			max(until.Sub(now).Milliseconds(), 0)+1000, s.cooldownsChannel(), "c "+s.instance+" "+ms+" "+provider).Err()
	})
}

var _ gate.SharedProviderCooldowns = (*Store)(nil)

// providerCooldowns reads the provider-wide cooldowns recorded.
func (s *Store) providerCooldowns() map[string]time.Time { return s.timesIn(s.cooldownsKey()) }

// timesIn reads a hash of provider → unix milliseconds (the cooldowns, the
// marks); nil when Redis does not answer.
func (s *Store) timesIn(key string) map[string]time.Time {
	var all map[string]string
	if err := s.call(func(ctx context.Context) error {
		var err error
		all, err = s.c.HGetAll(ctx, key).Result()
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

// dispatchCooldown hands another instance's provider-wide cooldown to the handler.
func (s *Store) dispatchCooldown(payload string) {
	rest, ok := strings.CutPrefix(payload, "c ")
	if !ok || s.on.ProviderCooldown == nil {
		return
	}
	parts := strings.SplitN(rest, " ", 3)
	if len(parts) != 3 || parts[0] == s.instance {
		return
	}
	if ms, err := strconv.ParseInt(parts[1], 10, 64); err == nil {
		s.on.ProviderCooldown(parts[2], time.UnixMilli(ms))
	}
}
