package pool

import (
	"context"
	"github.com/gatectl/gatectl/engine"
	"sync"
	"sync/atomic"
)

// Readings is where the pools get balance readings from. The balance package's
// refresh cache implements it; StaticReadings is a settable one for tests and the
// simulator.
type Readings interface {
	// Refresh brings the named providers' readings up to date before a draw: it
	// starts, concurrently, the sources that are due (no reading, or one older than
	// the source's refresh) and waits for exactly those, each bounded by its own
	// timeout (and by ctx). A fresh reading costs no round trip; concurrent calls on
	// one due source start it once; providers with no source are ignored. Called by
	// Router.Pick, at a session's start, and each refresh by a long-term wait on
	// the provider (Router.Wait); never when a started session is moved off an
	// exhausted provider.
	Refresh(ctx context.Context, providers []string)
	// Last returns the provider's latest reading (TakenAt set) and whether it has
	// one. It never blocks on a source. Called for every route of every draw, so it
	// must be cheap.
	Last(provider string) (engine.Reading, bool)
}

// StaticReadings is a Readings whose readings are set by hand. Refresh does
// nothing. The zero value is empty and ready; safe for concurrent use. Reads take
// no lock (the map is copied on write), so it also serves benchmarks.
type StaticReadings struct {
	mu sync.Mutex                                // serialises writers
	m  atomic.Pointer[map[string]engine.Reading] // provider -> latest reading; never mutated once stored
}

func (s *StaticReadings) update(fn func(map[string]engine.Reading)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]engine.Reading{}
	if cur := s.m.Load(); cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	fn(next)
	s.m.Store(&next)
}

// Set records r as the provider's reading (r.TakenAt as given).
func (s *StaticReadings) Set(provider string, r engine.Reading) {
	s.update(func(m map[string]engine.Reading) { m[provider] = r })
}

// Delete drops the provider's reading.
func (s *StaticReadings) Delete(provider string) {
	s.update(func(m map[string]engine.Reading) { delete(m, provider) })
}

// Refresh implements Readings; it does nothing.
func (s *StaticReadings) Refresh(context.Context, []string) {}

// Last implements Readings.
func (s *StaticReadings) Last(provider string) (engine.Reading, bool) {
	m := s.m.Load()
	if m == nil {
		return engine.Reading{}, false
	}
	r, ok := (*m)[provider]
	return r, ok
}

// noReadings is the Readings of a Router built without one.
type noReadings struct{}

func (noReadings) Refresh(context.Context, []string)  {}
func (noReadings) Last(string) (engine.Reading, bool) { return engine.Reading{}, false }

var (
	_ Readings = (*StaticReadings)(nil)
	_ Readings = noReadings{}
)
