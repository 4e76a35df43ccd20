package sim

import (
	"testing"
)

func TestDefaultScenarioPrint(t *testing.T) {
	s := DefaultScenario()
	for _, f := range []float64{1, 2, 0.5} {
		s.Gate.TPM = int(float64(s.Provider.TPM) * f)
		r, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range Modes {
			x := r.Modes[m]
			c := -1
			if x.ConvergedAfterWindows != nil {
				c = *x.ConvergedAfterWindows
			}
			t.Logf("start %.1f %-6s util %.3f 429 %d lost %d done %d p50 %d p99 %d fair %.3f conv %d q %.0f trig %.0f", f, m, x.Utilization, x.RateLimited, x.Lost, x.Completed, x.WaitP50Ms, x.WaitP99Ms, x.Fairness, c, x.FinalQuota, x.FinalTrigger)
		}
		t.Logf("learned %.2f", r.Modes[ModeGate].LearnedPerWindow)
	}
}
