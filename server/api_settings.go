package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/gatectl/gatectl/config"
)

// The runtime settings API: GET/PUT /gate/v1/settings/{retry,gate,quota},
// POST /gate/v1/settings/{section}/reset, GET /gate/v1/settings. A PUT takes the
// section's YAML keys and is validated by the config's own section tables; it
// applies to the next decision (the snapshot is rebuilt as a reload would) and
// is kept in the state file. See the settings package for the precedence against
// the file, and docs/steering.md.

// APISettingsSection is the answer of GET, PUT and reset on one section.
type APISettingsSection struct {
	Section string `json:"section"`
	// Effective is the section in force: the file's values with the overrides.
	Effective map[string]any `json:"effective"`
	// Overrides holds only the keys set at runtime.
	Overrides map[string]any `json:"overrides"`
	// File is the section as the config file gives it (its defaults for the keys
	// it leaves out).
	File map[string]any `json:"file"`
	// Defaults is the section at gatectl's defaults, as a config file that sets
	// none of its keys gives it: a file value equal to it is the default.
	Defaults map[string]any `json:"defaults"`
	// Warnings are what the change was accepted with (a first wait capped at
	// maxDelay, say), each "path: message".
	Warnings []string `json:"warnings,omitempty"`
}

// APISettingsEvent is the data of a "settings" event.
type APISettingsEvent struct {
	Section   string         `json:"section"`
	Overrides map[string]any `json:"overrides"`
}

// handleSettingsAll serves GET /gate/v1/settings: every section in force.
func (a *api) handleSettingsAll(w http.ResponseWriter, r *http.Request) {
	snap := a.s.snap.Current()
	out := map[string]map[string]any{}
	for _, sec := range config.RuntimeSections {
		obj, err := config.SectionObject(snap.Config, sec)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "", err.Error())
			return
		}
		out[sec] = obj
	}
	writeJSON(w, http.StatusOK, out)
}

// settingsSection returns the {section} of the path, or answers 404.
func (a *api) settingsSection(w http.ResponseWriter, r *http.Request) (string, bool) {
	sec := r.PathValue("section")
	if !slices.Contains(config.RuntimeSections, sec) {
		writeError(w, http.StatusNotFound, "section", fmt.Sprintf("no settings section %q (sections: %s)", sec, strings.Join(config.RuntimeSections, ", ")))
		return "", false
	}
	return sec, true
}

func (a *api) handleSettingsGet(w http.ResponseWriter, r *http.Request) {
	sec, ok := a.settingsSection(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, a.settingsView(sec, nil))
}

// settingsView is section as the current snapshot and the book have it.
func (a *api) settingsView(sec string, warnings []string) APISettingsSection {
	snap := a.s.snap.Current()
	eff, _ := config.SectionObject(snap.Config, sec)
	file, _ := config.SectionObject(snap.File, sec)
	defaults, _ := config.SectionObject(config.Default(), sec)
	return APISettingsSection{Section: sec, Effective: eff, Overrides: a.s.settings.Overrides(sec), File: file, Defaults: defaults, Warnings: warnings}
}

func (a *api) handleSettingsPut(w http.ResponseWriter, r *http.Request) {
	sec, ok := a.settingsSection(w, r)
	if !ok {
		return
	}
	partial, ok := settingsBody(w, r)
	if !ok {
		return
	}
	warns, err := a.s.settings.Set(a.s.snap.Current().File, sec, partial, func() error { return a.s.snap.Rebuild(r.Context()) })
	var ces config.Errors
	switch {
	case errors.As(err, &ces):
		field, msg := settingsError(sec, ces)
		writeError(w, http.StatusBadRequest, field, msg)
		return
	case err != nil:
		a.s.apiLog.Error("applying runtime settings failed; the previous ones stay", "section", sec, "error", err)
		writeError(w, http.StatusInternalServerError, "", "applying the settings failed; the previous ones stay: "+err.Error())
		return
	}
	var ws []string
	for _, w := range warns {
		ws = append(ws, w.Path+": "+w.Msg)
	}
	a.settingsChanged(sec, "set")
	writeJSON(w, http.StatusOK, a.settingsView(sec, ws))
}

func (a *api) handleSettingsReset(w http.ResponseWriter, r *http.Request) {
	sec, ok := a.settingsSection(w, r)
	if !ok {
		return
	}
	if err := a.s.settings.Reset(sec, func() error { return a.s.snap.Rebuild(r.Context()) }); err != nil {
		a.s.apiLog.Error("resetting runtime settings failed; they stay", "section", sec, "error", err)
		writeError(w, http.StatusInternalServerError, "", "resetting the settings failed; they stay: "+err.Error())
		return
	}
	a.settingsChanged(sec, "reset")
	writeJSON(w, http.StatusOK, a.settingsView(sec, nil))
}

// settingsChanged logs and announces a change of section's overrides.
func (a *api) settingsChanged(sec, how string) {
	over := a.s.settings.Overrides(sec)
	a.s.apiLog.Info("runtime settings changed", "section", sec, "change", how, "overrides", string(mustMarshal(over)))
	a.s.publishSettings(sec, over)
}

// publishSettings announces section's overrides on the event stream.
func (s *Server) publishSettings(sec string, over map[string]any) {
	s.bus.Publish(Event{Type: "settings", At: s.clock.Now(), Data: APISettingsEvent{Section: sec, Overrides: over}})
}

// settingsBody reads the PUT body: one JSON object (numbers kept as written, so
// 3.0 for an integer key is refused as the file refuses it).
func settingsBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, apiMaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body exceeds %d bytes", apiMaxBody))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "", "reading the request body: "+err.Error())
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		_, msg := apiDecodeError(err, body, nil)
		writeError(w, http.StatusBadRequest, "", msg)
		return nil, false
	}
	if err := dec.Decode(&json.RawMessage{}); err != io.EOF {
		writeError(w, http.StatusBadRequest, "", "unexpected data after the JSON object")
		return nil, false
	}
	obj, ok := v.(map[string]any)
	if !ok {
		writeError(w, http.StatusBadRequest, "", `expected a JSON object of the section's keys, such as {"rounds": 3}`)
		return nil, false
	}
	return obj, true
}

// settingsError turns the config's errors into the API's: the message is each
// "path: message" as the file would get it (without file and line), the field
// the first one's key inside the section.
func settingsError(sec string, es config.Errors) (field, msg string) {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Path + ": " + e.Msg
	}
	if len(es) > 0 {
		field = strings.TrimPrefix(strings.TrimPrefix(es[0].Path, sec), ".")
	}
	return field, strings.Join(parts, "; ")
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}
