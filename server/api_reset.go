package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/gate"
)

// APIModelReset is the answer of POST /gate/v1/models/{provider}/{model}/reset:
// the model, and its ledger before and after the reset (as GET /gate/v1/status
// shows it). `gatectl reset` prints it.
type APIModelReset struct {
	Provider string            `json:"provider"`
	Model    string            `json:"model"`
	Reset    bool              `json:"reset"`
	Before   gate.BucketStatus `json:"before"`
	Status   gate.BucketStatus `json:"status"`
}

// apiResetSuffix ends the reset path. A model name may contain slashes
// (openrouter's deepseek/deepseek-chat), and a ServeMux "{name...}" wildcard must
// be the pattern's last segment, so the route's {model...} captures everything
// after the provider ("deepseek/deepseek-chat/reset") and the handler takes the
// suffix off.
const apiResetSuffix = "/reset"

// handleModel serves POST /gate/v1/models/{provider}/{model...}; the one endpoint
// there is {model}/reset.
func (a *api) handleModel(w http.ResponseWriter, r *http.Request) {
	provider, rest := r.PathValue("provider"), r.PathValue("model")
	if rest == strings.TrimPrefix(apiResetSuffix, "/") {
		writeError(w, http.StatusBadRequest, "model", "the model is empty: POST /gate/v1/models/{provider}/{model}/reset")
		return
	}
	model, ok := strings.CutSuffix(rest, apiResetSuffix)
	if !ok {
		want := strings.TrimSuffix(r.URL.Path, "/")
		if !strings.HasSuffix(want, apiResetSuffix) { // a trailing slash alone is not a missing /reset
			want += apiResetSuffix
		}
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no endpoint %s (did you mean %s?)", r.URL.Path, want))
		return
	}
	a.handleModelReset(w, provider, model)
}

// handleModelReset makes the gate forget what it learned about one model (quota,
// triggers, clean-window record, count delay) and start again from the configured
// or stated limit. A running cooldown stays: the provider asked for it. The ledger
// announces the reset itself, as a learn event with step "reset".
func (a *api) handleModelReset(w http.ResponseWriter, provider, model string) {
	if err := apiFirstErr(apiCheckName("provider", provider), apiCheckName("model", model)); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	now := a.s.clock.Now()
	before, ok := a.s.ledger.Reset(now, provider, model)
	if !ok {
		if _, configured := a.s.snap.Current().Config.Providers[provider]; !configured {
			writeError(w, http.StatusNotFound, "provider", fmt.Sprintf("no provider %q in the config, and the gate has no ledger for %s/%s (models: %s)",
				provider, provider, model, a.knownModels(now)))
			return
		}
		writeError(w, http.StatusNotFound, "model", fmt.Sprintf("the gate has no ledger for %s/%s: it was not called since the server started (models: %s)",
			provider, model, a.knownModels(now)))
		return
	}
	a.s.apiLog.Info("model reset", "provider", provider, "model", model)
	writeJSON(w, http.StatusOK, APIModelReset{Provider: provider, Model: model, Reset: true,
		Before: before, Status: a.s.ledger.BucketStatus(now, provider, model)})
}

// apiMaxListedModels bounds the models a 404 lists.
const apiMaxListedModels = 20

// knownModels lists the provider/models the gate has a ledger for, for an error.
func (a *api) knownModels(now time.Time) string {
	st := a.s.ledger.Status(now)
	if len(st) == 0 {
		return "none yet"
	}
	names := make([]string, 0, min(len(st), apiMaxListedModels))
	for _, m := range st[:min(len(st), apiMaxListedModels)] {
		names = append(names, m.Provider+"/"+m.Model)
	}
	if len(st) > apiMaxListedModels {
		names = append(names, fmt.Sprintf("… %d more", len(st)-apiMaxListedModels))
	}
	return strings.Join(names, ", ")
}

// APIUnmark is the answer of POST /gate/v1/providers/{provider}/unmark: the
// provider, and when the mark lifted was set (empty when none held).
type APIUnmark struct {
	Provider string `json:"provider"`
	Unmarked bool   `json:"unmarked"` // a mark held and was lifted
	MarkedAt string `json:"markedAt,omitempty"`
}

// handleUnmark lifts a provider's exhaustion mark by hand (its allowance was
// topped up), so pools route to it again at once; with a shared store, on every
// instance.
func (a *api) handleUnmark(w http.ResponseWriter, r *http.Request) {
	provider := r.PathValue("provider")
	if err := apiCheckName("provider", provider); err != nil {
		apiFail(w, http.StatusBadRequest, err)
		return
	}
	if _, ok := a.s.snap.Current().Config.Providers[provider]; !ok {
		writeError(w, http.StatusNotFound, "provider", fmt.Sprintf("no provider %q in the config", provider))
		return
	}
	at, held := a.s.quota.Marked(provider)
	a.s.quota.Unmark(provider)
	out := APIUnmark{Provider: provider, Unmarked: held}
	if held {
		out.MarkedAt = at.UTC().Format(time.RFC3339Nano)
	}
	a.s.apiLog.Info("provider unmarked", "provider", provider, "held", held)
	writeJSON(w, http.StatusOK, out)
}
