package server

import (
	"sync"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/hashicorp/go-hclog"
)

// classifierErrorLogEvery is how often one classifier's run-time errors are
// logged: the first at once, then one line a minute with how many were not
// logged, so a rule that fails on every failure cannot flood the log. Every
// error is counted on gatectl_classifier_errors_total.
const classifierErrorLogEvery = time.Minute

// classifierErrors counts and logs the run-time errors of the chain's links.
// Links are named by the config, so the state is bounded by it.
type classifierErrors struct {
	clock   engine.Clock
	log     hclog.Logger
	metrics *Metrics
	// redact masks credentials in an error's text: an expr error quotes the
	// value it choked on, and a failure's headers and body may hold a key.
	redact func(string) string

	mu    sync.Mutex
	links map[string]*classifierErrorLog
}

type classifierErrorLog struct {
	logged     time.Time // when a line was last written
	suppressed int       // errors since then that were not logged
}

func newClassifierErrors(clock engine.Clock, log hclog.Logger, m *Metrics, redact func(string) string) *classifierErrors {
	return &classifierErrors{clock: clock, log: log, metrics: m, redact: redact, links: map[string]*classifierErrorLog{}}
}

// observe is the chain's error hook (snapshot.Manager.OnClassifierError).
func (c *classifierErrors) observe(link string, err error) {
	c.metrics.ClassifierError(link)
	now := c.clock.Now()
	c.mu.Lock()
	l := c.links[link]
	if l == nil {
		l = &classifierErrorLog{}
		c.links[link] = l
	}
	if !l.logged.IsZero() && now.Sub(l.logged) < classifierErrorLogEvery {
		l.suppressed++
		c.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.logged, l.suppressed = now, 0
	c.mu.Unlock()
	c.log.Warn("classifier failed; the next one in the chain decided", "classifier", link, "error", c.redact(err.Error()), "suppressed", suppressed)
}
