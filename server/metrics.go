package server

import (
	"strconv"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
	"github.com/gatectl/gatectl/wasm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the server's Prometheus metrics, on a registry of its own (so one
// process, or one test, can run several servers). Names follow
// gatectl_<subsystem>_<name>_<unit>.
type Metrics struct {
	Registry *prometheus.Registry

	// gatectl_gate_admissions_total{provider,model,reason}: admitted calls; reason
	// is "none" for a call that did not wait, else why it waited or failed open.
	admissions *prometheus.CounterVec
	// gatectl_gate_wait_seconds{provider,model}: admission waits of calls that waited.
	waits *prometheus.HistogramVec
	// gatectl_upstream_responses_total{provider,status}: upstream answers by status code (0: transport error).
	upstream *prometheus.CounterVec
	// gatectl_failures_total{class}: classified failures.
	failures *prometheus.CounterVec
	// gatectl_retry_actions_total{action}: the planner's answers (retry, failover, wait_long_term, give_up).
	actions *prometheus.CounterVec
	// gatectl_pool_events_total{kind}: failovers, long-term waits entered and left.
	poolEvents *prometheus.CounterVec
	// gatectl_proxy_overhead_seconds: request time spent in gatectl (total minus upstream, minus admission waits).
	overhead prometheus.Histogram
	// gatectl_config_reloads_total{result}: reloads that succeeded or failed.
	reloads *prometheus.CounterVec
	// classifierErrors counts the chain links' run-time errors, by classifier.
	classifierErrors *prometheus.CounterVec
}

// PluginStats reports the counters of every loaded plugin; /metrics reads it at
// scrape time. The daemon's wasm snapshot hook (and a *wasm.Host) is one.
type PluginStats interface {
	PluginStats() []wasm.PluginStat
}

// NewMetrics registers the metrics and the collectors that read the ledger, the
// balance sources and the plugins (plugins may be nil) at scrape time.
func NewMetrics(ledger *gate.Ledger, clock engine.Clock, readings func() []ReadingStatus, plugins PluginStats) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_gate_admissions_total",
		Help: "Calls admitted by the gate. reason: none (no wait), cooldown, tpm, rpm, otpm, pace, session-cap, queue, store, over-budget, max-wait, no-bucket, internal.",
	}, []string{"provider", "model", "reason"})
	m.waits = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gatectl_gate_wait_seconds",
		Help:    "How long admission held calls that waited.",
		Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120},
	}, []string{"provider", "model"})
	m.upstream = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_upstream_responses_total",
		Help: "Upstream responses by provider and HTTP status (0: no HTTP answer).",
	}, []string{"provider", "status"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_failures_total",
		Help: "Failures by class (RATE_LIMIT, QUOTA, OVERLOADED, SERVER, TIMEOUT, TRANSPORT, AUTH, INVALID_REQUEST, CONTEXT, MISLABELED, UNKNOWN).",
	}, []string{"class"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_retry_actions_total",
		Help: "Retry planner decisions by action: retry, failover, wait_long_term, give_up.",
	}, []string{"action"})
	m.poolEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_pool_events_total",
		Help: "Pool events by kind: failover, entered (a long-term wait), left.",
	}, []string{"kind"})
	m.overhead = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gatectl_proxy_overhead_seconds",
		Help:    "Time a proxied request spent in gatectl itself: total minus upstream time minus admission waits.",
		Buckets: []float64{25e-6, 50e-6, 100e-6, 150e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3},
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_config_reloads_total",
		Help: "Configuration reloads by result: ok, failed.",
	}, []string{"result"})
	m.classifierErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatectl_classifier_errors_total",
		Help: "Run-time errors of classifiers in the chain (a trapped plugin, a rule whose expression failed); the next classifier decided. classifier: the link's name.",
	}, []string{"classifier"})
	// The series whose labels are known ahead start at 0: a counter that
	// appears at 1 hides its first step from rate() and increase() (the
	// dashboard's first reload, first failure of a class, went uncounted).
	for _, r := range []string{"ok", "failed"} {
		m.reloads.WithLabelValues(r)
	}
	for _, c := range engine.Classes {
		m.failures.WithLabelValues(string(c))
	}
	for _, a := range []retry.ActionKind{retry.ActionRetry, retry.ActionFailover, retry.ActionWaitLongTerm, retry.ActionGiveUp} {
		m.actions.WithLabelValues(string(a))
	}
	for _, k := range []pool.EventKind{pool.EventFailover, pool.EventEntered, pool.EventLeft} {
		m.poolEvents.WithLabelValues(string(k))
	}
	m.Registry.MustRegister(m.classifierErrors, m.admissions, m.waits, m.upstream, m.failures, m.actions, m.poolEvents, m.overhead, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&ledgerCollector{ledger: ledger, clock: clock}, &balanceCollector{readings: readings}, pluginCollector{plugins: plugins})
	return m
}

// Admitted counts one admission and, when it waited, its wait.
func (m *Metrics) Admitted(provider, model string, t gate.Ticket) {
	if p, mdl := t.Model(); p != "" { // past gate.maxModels the call counts under provider/(other)
		provider, model = p, mdl
	}
	reason := t.Reason
	if reason == "" {
		reason = "none"
	}
	m.admissions.WithLabelValues(provider, model, reason).Inc()
	if t.Waited > 0 {
		m.waits.WithLabelValues(provider, model).Observe(t.Waited.Seconds())
	}
}

// ClassifierError counts one run-time error of the named classifier.
func (m *Metrics) ClassifierError(link string) { m.classifierErrors.WithLabelValues(link).Inc() }

// ForgetModels deletes the series of models the ledger evicted, so that the
// series, like the buckets, stay bounded.
func (m *Metrics) ForgetModels(keys []gate.ModelKey) {
	for _, k := range keys {
		l := prometheus.Labels{"provider": k.Provider, "model": k.Model}
		m.admissions.DeletePartialMatch(l)
		m.waits.DeletePartialMatch(l)
	}
}

// Upstream counts one upstream answer (status 0: transport error).
func (m *Metrics) Upstream(provider string, status int) {
	m.upstream.WithLabelValues(provider, strconv.Itoa(status)).Inc()
}

// Failure counts one classified failure.
func (m *Metrics) Failure(c engine.Class) { m.failures.WithLabelValues(string(c)).Inc() }

// Action counts one planner decision.
func (m *Metrics) Action(kind string) { m.actions.WithLabelValues(kind).Inc() }

// PoolEvent counts one pool event.
func (m *Metrics) PoolEvent(kind string) { m.poolEvents.WithLabelValues(kind).Inc() }

// Overhead records the time a request spent in gatectl itself.
func (m *Metrics) Overhead(d time.Duration) { m.overhead.Observe(d.Seconds()) }

// Reload counts one reload.
func (m *Metrics) Reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("ok").Inc()
	} else {
		m.reloads.WithLabelValues("failed").Inc()
	}
}

// ledgerCollector reads every bucket's status at scrape time.
type ledgerCollector struct {
	ledger *gate.Ledger
	clock  engine.Clock
}

var (
	descWindowTokens = prometheus.NewDesc("gatectl_gate_window_tokens", "Tokens in the model's sliding window, reservations included.", []string{"provider", "model"}, nil)
	descInFlight     = prometheus.NewDesc("gatectl_gate_in_flight_requests", "Admitted calls not yet settled.", []string{"provider", "model"}, nil)
	descWaiting      = prometheus.NewDesc("gatectl_gate_waiting_requests", "Calls queued for admission.", []string{"provider", "model"}, nil)
	descQuota        = prometheus.NewDesc("gatectl_gate_learned_quota_tokens", "The learned token quota per window.", []string{"provider", "model"}, nil)
	descTrigger      = prometheus.NewDesc("gatectl_gate_trigger_tokens", "The tightest window reading at a 429 (0: not observed).", []string{"provider", "model"}, nil)
	descCooldown     = prometheus.NewDesc("gatectl_gate_cooldown_seconds", "Cooldown left.", []string{"provider", "model"}, nil)
	descRateLimited  = prometheus.NewDesc("gatectl_gate_rate_limited_total", "429s the gate observed.", []string{"provider", "model"}, nil)
	descBalance      = prometheus.NewDesc("gatectl_balance_remaining", "The last balance reading's remaining allowance (unit as configured).", []string{"provider"}, nil)
	descBalanceAge   = prometheus.NewDesc("gatectl_balance_reading_age_seconds", "Age of the last good balance reading.", []string{"provider"}, nil)
)

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWindowTokens, descInFlight, descWaiting, descQuota, descTrigger, descCooldown, descRateLimited} {
		ch <- d
	}
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.ledger.Status(c.clock.Now()) {
		l := []string{st.Provider, st.Model}
		ch <- prometheus.MustNewConstMetric(descWindowTokens, prometheus.GaugeValue, float64(st.WindowTokens), l...)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(st.InFlight), l...)
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(st.Waiting), l...)
		ch <- prometheus.MustNewConstMetric(descQuota, prometheus.GaugeValue, st.Quota, l...)
		ch <- prometheus.MustNewConstMetric(descTrigger, prometheus.GaugeValue, st.Trigger, l...)
		ch <- prometheus.MustNewConstMetric(descCooldown, prometheus.GaugeValue, float64(st.CooldownMs)/1000, l...)
		ch <- prometheus.MustNewConstMetric(descRateLimited, prometheus.CounterValue, float64(st.RateLimited), l...)
	}
}

// RetryStats registers the retry planner's counters (GET /gate/v1/stats's
// lifetime ones), read at scrape time. Sessions are never a label: retries are
// counted by provider and, apart, by class.
func (m *Metrics) RetryStats(read func() retry.Stats) {
	m.Registry.MustRegister(retryStatsCollector{read: read})
}

var (
	descRetries         = prometheus.NewDesc("gatectl_retry_retries_total", "Retries the planner planned, both budgets, by provider.", []string{"provider"}, nil)
	descRetriesByClass  = prometheus.NewDesc("gatectl_retry_retries_by_class_total", "Retries the planner planned, both budgets, by failure class (RATE_LIMIT, OVERLOADED, SERVER, TIMEOUT, TRANSPORT, QUOTA, MISLABELED, …).", []string{"class"}, nil)
	descRetryMislabeled = prometheus.NewDesc("gatectl_retry_mislabeled_replays_total", "Retries of mislabeled 400s (their own budget; also in gatectl_retry_retries_total).", nil, nil)
	descRetryWaited     = prometheus.NewDesc("gatectl_retry_waited_seconds_total", "Sum of the planned waits of retries (a rate limit's wait is the gate's: see gatectl_gate_wait_seconds).", nil, nil)
	descRetryGaveUp     = prometheus.NewDesc("gatectl_retry_give_ups_total", "Failures given up because their retry budget was spent.", nil, nil)
	descRetryNot        = prometheus.NewDesc("gatectl_retry_not_retried_total", "Failures given up because their class is not retried.", nil, nil)
	descRetryHintless   = prometheus.NewDesc("gatectl_retry_hintless_waits_total", "Capacity failures (RATE_LIMIT, OVERLOADED, SERVER) that came without a wait hint.", nil, nil)
	descRetryFailovers  = prometheus.NewDesc("gatectl_retry_failovers_total", "QUOTA failures moved to another route.", nil, nil)
	descRetryLongTerm   = prometheus.NewDesc("gatectl_retry_long_term_waits_total", "QUOTA failures waited out long-term.", nil, nil)
)

type retryStatsCollector struct{ read func() retry.Stats }

func (retryStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRetries, descRetriesByClass, descRetryMislabeled, descRetryWaited, descRetryGaveUp, descRetryNot, descRetryHintless, descRetryFailovers, descRetryLongTerm} {
		ch <- d
	}
}

func (c retryStatsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.read()
	for p, n := range st.ByProvider {
		ch <- prometheus.MustNewConstMetric(descRetries, prometheus.CounterValue, float64(n), p)
	}
	for c, n := range st.ByClass {
		ch <- prometheus.MustNewConstMetric(descRetriesByClass, prometheus.CounterValue, float64(n), string(c))
	}
	for d, v := range map[*prometheus.Desc]float64{
		descRetryMislabeled: float64(st.MislabeledRetries), descRetryWaited: st.Waited.Seconds(),
		descRetryGaveUp: float64(st.GaveUp), descRetryNot: float64(st.NotRetried), descRetryHintless: float64(st.HintlessCapacity),
		descRetryFailovers: float64(st.Failovers), descRetryLongTerm: float64(st.LongTermWaits),
	} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
}

// ReadingStatus is one balance source's last good reading, for metrics and the API.
type ReadingStatus struct {
	Provider  string
	Remaining *float64
	Age       time.Duration
	OK        bool
}

type balanceCollector struct{ readings func() []ReadingStatus }

func (c *balanceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBalance
	ch <- descBalanceAge
}

func (c *balanceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.readings == nil {
		return
	}
	for _, r := range c.readings() {
		if !r.OK {
			continue
		}
		if r.Remaining != nil {
			ch <- prometheus.MustNewConstMetric(descBalance, prometheus.GaugeValue, *r.Remaining, r.Provider)
		}
		ch <- prometheus.MustNewConstMetric(descBalanceAge, prometheus.GaugeValue, r.Age.Seconds(), r.Provider)
	}
}

var (
	descPluginCalls    = prometheus.NewDesc("gatectl_plugin_calls_total", "Calls of each WebAssembly plugin. kind: classify, score, balance.", []string{"plugin", "kind"}, nil)
	descPluginFailures = prometheus.NewDesc("gatectl_plugin_failures_total", "Failed plugin calls (trap, timeout, bad output, error code); they fall through to the next classifier.", []string{"plugin", "kind"}, nil)
	descPluginSkipped  = prometheus.NewDesc("gatectl_plugin_skipped_total", "Calls refused while the plugin was quarantined.", []string{"plugin", "kind"}, nil)
	descPluginSeconds  = prometheus.NewDesc("gatectl_plugin_call_seconds_total", "Time spent inside plugin calls; divide by calls for the mean.", []string{"plugin", "kind"}, nil)
	descPluginInit     = prometheus.NewDesc("gatectl_plugin_init_seconds_total", "Time spent making plugin instances (instantiate, _initialize, gate_init): at load, and on a call after an instance was discarded.", []string{"plugin", "kind"}, nil)
	descPluginQuar     = prometheus.NewDesc("gatectl_plugin_quarantined", "1 while the plugin is quarantined after repeated failures.", []string{"plugin", "kind"}, nil)
)

// pluginCollector reads the plugins' counters at scrape time; plugins may be nil.
type pluginCollector struct{ plugins PluginStats }

func (pluginCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPluginCalls, descPluginFailures, descPluginSkipped, descPluginSeconds, descPluginInit, descPluginQuar} {
		ch <- d
	}
}

func (c pluginCollector) Collect(ch chan<- prometheus.Metric) {
	if c.plugins == nil {
		return
	}
	for _, p := range c.plugins.PluginStats() {
		l := []string{p.Name, string(p.Kind)}
		st := p.Stats
		ch <- prometheus.MustNewConstMetric(descPluginCalls, prometheus.CounterValue, float64(st.Calls), l...)
		ch <- prometheus.MustNewConstMetric(descPluginFailures, prometheus.CounterValue, float64(st.Failures), l...)
		ch <- prometheus.MustNewConstMetric(descPluginSkipped, prometheus.CounterValue, float64(st.Skipped), l...)
		ch <- prometheus.MustNewConstMetric(descPluginSeconds, prometheus.CounterValue, st.CallTime.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(descPluginInit, prometheus.CounterValue, st.InitTime.Seconds(), l...)
		q := 0.0
		if st.Quarantined {
			q = 1
		}
		ch <- prometheus.MustNewConstMetric(descPluginQuar, prometheus.GaugeValue, q, l...)
	}
}

var _ PluginStats = (*wasm.Host)(nil)
