package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// closeShared closes the Redis store, if there is one.
func (s *Server) closeShared() {
	if s.shared != nil {
		_ = s.shared.Close()
	}
}

// storeStatus is the shared store's health for /readyz and the status API; nil
// without one.
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
