package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gatectl/gatectl/engine"
	"github.com/gatectl/gatectl/engine/gate"
	"github.com/gatectl/gatectl/wasm"
	"github.com/prometheus/client_golang/prometheus"
)

// pluginStatsFunc is a PluginStats backed by a function.
type pluginStatsFunc func() []wasm.PluginStat

func (f pluginStatsFunc) PluginStats() []wasm.PluginStat { return f() }

// The plugin metrics read the PluginStats they were given (the daemon passes its
// wasm hook in Options.Plugins); none given, none exported.
func TestPluginMetricsComeFromTheGivenStats(t *testing.T) {
	clock := engine.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ledger, err := gate.NewLedger(gate.DefaultConfig(), clock)
	if err != nil {
		t.Fatal(err)
	}
	stats := pluginStatsFunc(func() []wasm.PluginStat {
		return []wasm.PluginStat{{Name: "octafuse.wasm", Kind: wasm.KindClassify, Stats: wasm.Stats{Calls: 3, Failures: 1}}}
	})
	if got := pluginCalls(t, NewMetrics(ledger, clock, nil, stats).Registry); got != "octafuse.wasm/classify=3" {
		t.Errorf("gatectl_plugin_calls_total = %q", got)
	}
	if got := pluginCalls(t, NewMetrics(ledger, clock, nil, nil).Registry); got != "" {
		t.Errorf("without plugins: gatectl_plugin_calls_total = %q", got)
	}
}

// pluginCalls renders the gatectl_plugin_calls_total series as plugin/kind=value.
func pluginCalls(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "gatectl_plugin_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf("%s/%s=%g", labels["plugin"], labels["kind"], m.GetCounter().GetValue()))
		}
	}
	return strings.Join(out, ",")
}
