package server

import (
	"time"

	"github.com/gatectl/gatectl/engine/gate"
	"github.com/prometheus/client_golang/prometheus"
)

// closeShared closes the Redis store, if there is one.
func (s *Server) closeShared() {
	if s.shared != nil {
		_ = s.shared.Close()
	}
}

// storeStatus is the shared store's health for /readyz; nil without one.
func (s *Server) storeStatus() map[string]any {
	if s.shared == nil {
		return nil
	}
	state := "ok"
	if s.shared.Degraded() {
		state = "degraded"
	}
	o := s.shared.Options()
	return map[string]any{"kind": "redis", "state": state, "onError": o.OnError, "keyPrefix": o.KeyPrefix, "errors": s.shared.Errors()}
}

// registerStoreMetrics exports the shared store's health: degraded (1 while
// Redis does not answer) and the failed calls.
func (s *Server) registerStoreMetrics() {
	s.metrics.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gatectl_store_degraded",
			Help: "1 while the shared store (Redis) does not answer and the gate follows store.redis.onError; 0 otherwise or without a shared store.",
		}, func() float64 {
			if s.shared != nil && s.shared.Degraded() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gatectl_store_errors_total",
			Help: "Calls to the shared store (Redis) that failed or missed their deadline.",
		}, func() float64 {
			if s.shared == nil {
				return 0
			}
			return float64(s.shared.Errors())
		}),
	)
}

// sharedStatus is the shared view for the status API: the store's health and,
// while Redis answers, every instance's window of each model this one knows.
func (s *Server) sharedStatus(models []gate.BucketStatus) *APIStore {
	if s.shared == nil {
		return nil
	}
	o := s.shared.Options()
	st := &APIStore{Kind: "redis", State: "ok", OnError: o.OnError, KeyPrefix: o.KeyPrefix, Errors: s.shared.Errors()}
	if s.shared.Degraded() {
		st.State = "degraded"
		return st
	}
	for _, m := range models {
		if v, err := s.shared.View(m.Provider, m.Model); err == nil {
			st.Shared = append(st.Shared, v)
		}
	}
	return st
}

// shareMark is the pool router's OnMark: with a shared store, every instance
// routes around a provider any of them found exhausted.
func (s *Server) shareMark() func(provider string, at time.Time) {
	if s.shared == nil {
		return nil
	}
	return s.shared.ShareMark
}

// shareUnmark is the pool router's OnUnmark: a mark lifted by hand on one
// instance is lifted on all of them.
func (s *Server) shareUnmark() func(provider string, at time.Time) {
	if s.shared == nil {
		return nil
	}
	return s.shared.ShareUnmark
}
