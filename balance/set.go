package balance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/pool"
)

// Set holds one Cached source per provider and gives the pools their readings: it
// implements pool.Readings. A Set is immutable once built and safe for concurrent
// use; its sources keep their own state.
type Set struct {
	sources map[string]*Cached
	order   []string // providers in declared order
}

// NewSet builds a Set from providers and their sources, in declared order. A
// provider named twice, or a nil source, is an error.
func NewSet(providers []string, sources []*Cached) (*Set, error) {
	if len(providers) != len(sources) {
		return nil, fmt.Errorf("balance: NewSet: %d providers for %d sources", len(providers), len(sources))
	}
	s := &Set{sources: make(map[string]*Cached, len(providers))}
	for i, p := range providers {
		if sources[i] == nil {
			return nil, fmt.Errorf("balance: NewSet: provider %q has a nil source", p)
		}
		if _, dup := s.sources[p]; dup {
			return nil, fmt.Errorf("balance: provider %q has two balance sources", p)
		}
		s.sources[p] = sources[i]
		s.order = append(s.order, p)
	}
	return s, nil
}

// Providers lists the providers with a source, in declared order.
func (s *Set) Providers() []string { return append([]string(nil), s.order...) }

// Source returns the provider's source, or nil.
func (s *Set) Source(provider string) *Cached { return s.sources[provider] }

// Refresh reads, concurrently, the named providers' sources that are due, and
// returns when every one of those has answered or timed out (or ctx ended). A fresh
// source costs nothing; concurrent Refresh calls share each source's read; a
// provider with no source is ignored. Outcomes are then available from Last.
func (s *Set) Refresh(ctx context.Context, providers []string) {
	var wg sync.WaitGroup
	seen := make(map[string]bool, len(providers))
	for _, p := range providers {
		src := s.sources[p]
		if src == nil || seen[p] {
			continue
		}
		seen[p] = true
		if !src.Due(src.clock.Now()) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			src.Read(ctx) // the outcome is kept by src; errors are logged there
		}()
	}
	wg.Wait()
}

// Last returns the provider's latest reading and whether it has one (see
// Cached.Last). It never blocks on a source.
func (s *Set) Last(provider string) (engine.Reading, bool) {
	src := s.sources[provider]
	if src == nil {
		return engine.Reading{}, false
	}
	return src.Last()
}

// Status reports every source's state at the clock's time, by provider.
func (s *Set) Status() map[string]Status {
	out := make(map[string]Status, len(s.sources))
	for p, src := range s.sources {
		out[p] = src.Status(src.clock.Now())
	}
	return out
}

// Close closes every source (see Cached.Close), reporting every error. A Set is
// closed by the snapshot that owns it, once no request reads it.
func (s *Set) Close() error {
	var errs []error
	for _, p := range s.order {
		if err := s.sources[p].Close(); err != nil {
			errs = append(errs, fmt.Errorf("balance: %s: close: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

var (
	_ pool.Readings = (*Set)(nil)
	_ io.Closer     = (*Set)(nil)
)
