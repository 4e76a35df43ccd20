// Package settings keeps the runtime settings of a running server: keys of the
// gate:, retry: and quota: sections set through the API, over what the config
// file says, kept in the state file so that a restart keeps them.
//
// The precedence is one rule: a runtime setting applies over the file, until
// the file changes that key. Each override records the file's value for its key
// at the time it was set; when the file (on a reload, or at the next start) says
// something else for that key, the override is dropped and the file's value is
// used. Keys the file did not change keep their overrides.
//
// Values are validated by the config package's own section tables
// (config.WithSection), so the API refuses what the file refuses, with the same
// message. A Book is safe for concurrent use.
package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gatectl/gatectl/config"
	"github.com/hashicorp/go-hclog"
)

// Store keeps one record per section; the state file (state.Store) is one.
type Store interface {
	// LoadSettings returns every record, by section.
	LoadSettings() (map[string][]byte, error)
	// SaveSettings writes section's record; nil deletes it.
	SaveSettings(section string, v []byte) error
}

// Override is one key set at runtime.
type Override struct {
	// Key is the key's path inside its section: ["rounds"], ["hintClamp", "max"],
	// ["models", "deepseek/deepseek-chat", "tpm"].
	Key []string `json:"key"`
	// Value is the value set, as JSON.
	Value json.RawMessage `json:"value"`
	// File is the file's value for Key when the override was set, as JSON; nil
	// when the file left the key out (a model it does not list).
	File json.RawMessage `json:"file,omitempty"`
	// SetAt is when it was set.
	SetAt time.Time `json:"setAt"`
}

// Dropped is an override the file's config took over.
type Dropped struct {
	Section string
	Override
	// Now is the file's value now (nil: left out).
	Now json.RawMessage
	// Reason says why: the file changed the key, or the section's overrides no
	// longer fit the file.
	Reason string
}

// record is what the store keeps per section.
type record struct {
	Overrides []Override `json:"overrides"`
}

// Book holds the runtime overrides of every section.
type Book struct {
	store  Store
	now    func() time.Time
	logger hclog.Logger

	// writeMu serialises Set and Reset, which run apply (a snapshot rebuild,
	// under the snapshot manager's lock) while holding it. Reconcile runs under
	// that manager lock (from a swap callback), so it must not take writeMu: it
	// takes mu alone. A Set racing a Reconcile may write back an override the
	// file took over; Apply never applies it, and the next Reconcile drops it.
	writeMu sync.Mutex
	mu      sync.Mutex // guards over and inForce
	// over holds each section's overrides, sorted by key. The map and its slices
	// are replaced, never changed in place.
	over map[string][]Override
	// inForce is the file of the last Reconcile: the server calls it each time
	// a new file is in force.
	inForce *config.Config
}

// Open reads the overrides the store holds. A record it cannot read is logged
// and left out (the file's values apply): a damaged record must not keep the
// server from starting. now is the clock of SetAt; logger gets "settings".
func Open(store Store, now func() time.Time, logger hclog.Logger) (*Book, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	b := &Book{store: store, now: now, logger: logger.Named("settings"), over: map[string][]Override{}}
	recs, err := store.LoadSettings()
	if err != nil {
		return nil, err
	}
	for sec, raw := range recs {
		var r record
		if err := json.Unmarshal(raw, &r); err != nil || !slices.Contains(config.RuntimeSections, sec) {
			b.logger.Warn("ignoring an unreadable runtime settings record; the config file's values apply", "section", sec, "error", err)
			continue
		}
		if len(r.Overrides) > 0 {
			b.over[sec] = r.Overrides
		}
	}
	return b, nil
}

// Empty reports whether no override is set.
func (b *Book) Empty() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.over) == 0
}

// Overrides returns section's overrides as an object of the section's keys
// (nested sections nested): what GET /gate/v1/settings/{section} shows.
func (b *Book) Overrides(section string) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return nest(b.over[section])
}

// List returns a copy of section's overrides, sorted by key.
func (b *Book) List(section string) []Override {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.over[section])
}

// Apply returns file with the overrides over it: the overlay a snapshot is
// built from. An override the file has changed since it was set is left out (a
// later Reconcile drops it for good), and so is every override of a section that
// no longer fits the file. Apply does not change the book.
func (b *Book) Apply(file *config.Config) (*config.Config, error) {
	b.mu.Lock()
	over := b.over
	b.mu.Unlock()
	cfg, _, _ := plan(file, over)
	return cfg, nil
}

// Reconcile drops, for good, the overrides file has taken over (see Apply), logs
// each (at info when the file changed the key, at warn when the value no longer
// validates) and returns them. The server calls it once a snapshot of file is
// in force, and at start.
func (b *Book) Reconcile(file *config.Config) []Dropped {
	b.mu.Lock()
	_, keep, dropped := plan(file, b.over)
	b.over, b.inForce = keep, file
	b.mu.Unlock()
	changed := map[string]bool{}
	for _, d := range dropped {
		changed[d.Section] = true
		msg, log := "runtime setting dropped: the config file wins for the keys it changes", b.logger.Info
		if d.Reason != reasonFileChanged { // the value itself is refused: someone should look
			msg, log = "runtime setting dropped: the config refuses it; the file's value applies", b.logger.Warn
		}
		log(msg, "section", d.Section, "key", strings.Join(d.Key, "."), "value", string(d.Value),
			"file_was", rawText(d.File), "file_now", rawText(d.Now), "reason", d.Reason)
	}
	for sec := range changed {
		if err := b.save(sec, keep[sec]); err != nil {
			b.logger.Warn("saving runtime settings failed; the drop holds until the next restart", "section", sec, "error", err)
		}
	}
	return dropped
}

// Set validates partial (an object of section's keys) against file with the
// section's other overrides, records each key it sets (with the file's value for
// it), runs apply (the server rebuilds its snapshot) and saves. When validation
// fails the error is config.Errors, each with Path ("retry.multiplier") and Msg
// as the file would get them; when apply or the save fails nothing changes.
// Warnings (a first wait capped at maxDelay, say) come back.
func (b *Book) Set(file *config.Config, section string, partial map[string]any, apply func() error) (config.Errors, error) {
	if !slices.Contains(config.RuntimeSections, section) {
		_, err := config.SectionObject(file, section)
		return nil, err
	}
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	b.mu.Lock()
	old := b.over[section]
	b.mu.Unlock()

	cfg, _, _ := plan(file, map[string][]Override{section: old})
	effObj, err := config.SectionObject(cfg, section)
	if err != nil {
		return nil, err
	}
	fileObj, _ := config.SectionObject(file, section)
	var leaves []Override
	flatten(nil, partial, effObj, &leaves)
	now := b.now()
	next := slices.Clone(old)
	for _, l := range leaves {
		// A key set again replaces its override, and a key set whole replaces the
		// overrides below it.
		next = slices.DeleteFunc(next, func(o Override) bool { return hasPrefix(o.Key, l.Key) })
		l.SetAt = now
		if v, ok := lookup(fileObj, l.Key); ok {
			l.File = mustJSON(v)
		}
		next = append(next, l)
	}
	sortOverrides(next)
	_, warns, err := config.WithSection(file, section, overlayObject(fileObj, next))
	if err != nil {
		return nil, err
	}
	if err := b.commit(section, old, next, apply); err != nil {
		return nil, err
	}
	// A reload put another file in force after the caller read file: the
	// overrides above recorded the older file's values, and Apply leaves out
	// those the newer one changed. Drop them, as that reload's Reconcile would
	// have had they been set before it (else one would lie in the book unused,
	// and come back to force if the file went back to the old value).
	b.mu.Lock()
	cur := b.inForce
	b.mu.Unlock()
	if cur != nil && cur != file {
		b.Reconcile(cur)
	}
	return warns, nil
}

// Reset drops section's overrides, runs apply and saves; on failure nothing changes.
func (b *Book) Reset(section string, apply func() error) error {
	if !slices.Contains(config.RuntimeSections, section) {
		return fmt.Errorf("unknown settings section %q (sections: %s)", section, strings.Join(config.RuntimeSections, ", "))
	}
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	b.mu.Lock()
	old := b.over[section]
	b.mu.Unlock()
	return b.commit(section, old, nil, apply)
}

// commit puts next in place of old, applies and saves; on failure old is back.
// writeMu is held.
func (b *Book) commit(section string, old, next []Override, apply func() error) error {
	b.put(section, next)
	err := apply()
	if err == nil {
		if err = b.save(section, next); err != nil {
			b.put(section, old)
			if aerr := apply(); aerr != nil {
				err = errors.Join(err, aerr)
			}
		}
	} else {
		b.put(section, old)
		if aerr := apply(); aerr != nil {
			b.logger.Error("restoring the previous runtime settings failed", "section", section, "error", aerr)
		}
	}
	return err
}

// put replaces section's overrides. The map is copied, never changed in place:
// Apply reads the one it loaded without holding mu.
func (b *Book) put(section string, ovs []Override) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := maps.Clone(b.over)
	if len(ovs) == 0 {
		delete(next, section)
	} else {
		next[section] = ovs
	}
	b.over = next
}

func (b *Book) save(section string, ovs []Override) error {
	if len(ovs) == 0 {
		return b.store.SaveSettings(section, nil)
	}
	v, err := json.Marshal(record{Overrides: ovs})
	if err != nil {
		return err
	}
	return b.store.SaveSettings(section, v)
}

// reasonFileChanged is the Reason of an override dropped because the file
// changed its key (the expected case, logged at info).
const reasonFileChanged = "the file changed this key"

// plan applies over to file section by section. keep holds the overrides that
// apply; dropped those the file took over. cfg is file when nothing applies.
func plan(file *config.Config, over map[string][]Override) (cfg *config.Config, keep map[string][]Override, dropped []Dropped) {
	cfg, keep = file, map[string][]Override{}
	for _, sec := range config.RuntimeSections {
		ovs := over[sec]
		if len(ovs) == 0 {
			continue
		}
		fileObj, _ := config.SectionObject(file, sec)
		var apply []Override
		for _, o := range ovs {
			now, ok := lookup(fileObj, o.Key)
			var nowRaw json.RawMessage
			if ok {
				nowRaw = mustJSON(now)
			}
			if !sameJSON(o.File, nowRaw) {
				dropped = append(dropped, Dropped{Section: sec, Override: o, Now: nowRaw, Reason: reasonFileChanged})
				continue
			}
			apply = append(apply, o)
		}
		if len(apply) == 0 {
			continue
		}
		next, _, err := config.WithSection(cfg, sec, overlayObject(fileObj, apply))
		if err != nil {
			for _, o := range apply {
				now, _ := lookup(fileObj, o.Key)
				dropped = append(dropped, Dropped{Section: sec, Override: o, Now: mustJSON(now),
					Reason: "the section's runtime settings no longer fit the file: " + err.Error()})
			}
			continue
		}
		cfg, keep[sec] = next, apply
	}
	return cfg, keep, dropped
}

// overlayObject is what WithSection decodes: the overrides nested, with each
// top-level object merged over the file's. A nested section would keep its other
// keys anyway; a mapping such as gate.models is replaced whole by the decoder,
// so the file's entries must be part of it.
func overlayObject(fileObj map[string]any, ovs []Override) map[string]any {
	obj := nest(ovs)
	for k, v := range obj {
		if om, ok := v.(map[string]any); ok {
			if fm, ok := fileObj[k].(map[string]any); ok {
				obj[k] = merge(clone(fm).(map[string]any), om)
			}
		}
	}
	return obj
}

// flatten splits partial into one override per key, descending into an object
// as long as the value in force there is an object too (so a nested section
// given in part sets only the keys it names).
func flatten(prefix []string, partial, eff map[string]any, out *[]Override) {
	for k, v := range partial {
		key := append(slices.Clone(prefix), k)
		if pm, ok := v.(map[string]any); ok && len(pm) > 0 {
			if em, ok := eff[k].(map[string]any); ok {
				flatten(key, pm, em, out)
				continue
			}
		}
		*out = append(*out, Override{Key: key, Value: mustJSON(v)})
	}
}

// nest builds the object the overrides set, in key order (a whole object first,
// the keys set below it merged in).
func nest(ovs []Override) map[string]any {
	root := map[string]any{}
	for _, o := range ovs {
		var v any
		d := json.NewDecoder(bytes.NewReader(o.Value))
		d.UseNumber()
		if d.Decode(&v) != nil {
			continue
		}
		m := root
		for _, seg := range o.Key[:len(o.Key)-1] {
			child, ok := m[seg].(map[string]any)
			if !ok {
				child = map[string]any{}
				m[seg] = child
			}
			m = child
		}
		last := o.Key[len(o.Key)-1]
		if em, ok := m[last].(map[string]any); ok {
			if vm, ok := v.(map[string]any); ok {
				m[last] = merge(em, vm)
				continue
			}
		}
		m[last] = v
	}
	return root
}

// merge writes src's keys into dst, objects merged key by key; it returns dst.
func merge(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if vm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = merge(dm, vm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// clone deep-copies a JSON-shaped value.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = clone(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = clone(e)
		}
		return out
	}
	return v
}

// lookup returns the value at key in obj.
func lookup(obj map[string]any, key []string) (any, bool) {
	var cur any = obj
	for _, seg := range key {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func hasPrefix(key, prefix []string) bool {
	return len(key) >= len(prefix) && slices.Equal(key[:len(prefix)], prefix)
}

func sortOverrides(ovs []Override) {
	slices.SortStableFunc(ovs, func(a, b Override) int {
		return slices.Compare(a.Key, b.Key)
	})
}

// mustJSON encodes a JSON-shaped value (it cannot fail on one).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// sameJSON compares two encodings by value (key order and number spelling aside).
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(mustJSON(x), mustJSON(y))
}

func rawText(r json.RawMessage) string {
	if r == nil {
		return "(not set)"
	}
	return string(r)
}
