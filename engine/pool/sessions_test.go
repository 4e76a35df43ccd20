package pool

import (
	"errors"
	"strings"
	"testing"
)

func TestSessionParse(t *testing.T) {
	for in, want := range map[string]string{"on": "on", "OFF": "off", " Default ": "default"} {
		if got, err := ParseSwitch(in); err != nil || got != want {
			t.Errorf("ParseSwitch(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseSwitch("status"); !errors.Is(err, ErrSessionSetting) || !strings.Contains(err.Error(), "choices: on, off, default") {
		t.Errorf("ParseSwitch(status) = %v", err)
	}
	for in, want := range map[string]string{"off": "off", "Default": "default", "medium": "medium", "pool-2": "pool-2"} {
		if got, err := ParsePoolSetting(in); err != nil || got != want {
			t.Errorf("ParsePoolSetting(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "status", "none", "Medium", "a b"} {
		if _, err := ParsePoolSetting(in); !errors.Is(err, ErrSessionSetting) {
			t.Errorf("ParsePoolSetting(%q) = %v", in, err)
		}
	}
}

// TestSessionInheritance: a forked session takes, once, a snapshot of its nearest
// ancestor's explicit setting, field by field.
func TestSessionInheritance(t *testing.T) {
	type op struct {
		kind  string // "switch", "pool", "fork"
		id    string
		value string // the setting, or the parent for "fork"
	}
	cases := []struct {
		name    string
		ops     []op
		id      string
		want    SessionRecord
		enabled bool // with defaultEnabled true
	}{
		{"no record follows the default", nil, "s", SessionRecord{}, true},
		{"explicit on the session", []op{{"switch", "s", "off"}, {"pool", "s", "medium"}}, "s",
			SessionRecord{Switch: "off", SwitchSource: SourceSession, Pool: "medium", PoolSource: SourceSession}, false},
		{"default clears", []op{{"switch", "s", "off"}, {"switch", "s", "default"}, {"pool", "s", "off"}, {"pool", "s", "default"}}, "s", SessionRecord{}, true},
		{"child inherits the parent's explicit settings", []op{{"switch", "p", "off"}, {"pool", "p", "advice"}, {"fork", "c", "p"}}, "c",
			SessionRecord{Switch: "off", SwitchSource: SourceInherited, Pool: "advice", PoolSource: SourceInherited, Parent: "p"}, false},
		{"a snapshot: the parent's later change does not reach the child", []op{{"switch", "p", "off"}, {"fork", "c", "p"}, {"switch", "p", "on"}}, "c",
			SessionRecord{Switch: "off", SwitchSource: SourceInherited, Parent: "p"}, false},
		{"nothing explicit upstream: nothing inherited", []op{{"fork", "c", "p"}, {"switch", "p", "off"}}, "c",
			SessionRecord{Parent: "p"}, true},
		{"the nearest ancestor with a setting, per field", []op{{"switch", "g", "off"}, {"pool", "g", "medium"}, {"fork", "p", "g"},
			{"pool", "p", "advice"}, {"fork", "c", "p"}}, "c",
			SessionRecord{Switch: "off", SwitchSource: SourceInherited, Pool: "advice", PoolSource: SourceInherited, Parent: "p"}, false},
		{"skips an ancestor with nothing explicit", []op{{"fork", "p", "g"}, {"switch", "g", "off"}, {"fork", "c", "p"}}, "c",
			SessionRecord{Switch: "off", SwitchSource: SourceInherited, Parent: "p"}, false},
		{"a grandchild inherits an inherited value", []op{{"switch", "g", "off"}, {"fork", "p", "g"}, {"fork", "c", "p"}}, "c",
			SessionRecord{Switch: "off", SwitchSource: SourceInherited, Parent: "p"}, false},
		{"default on the child clears, not re-inherits", []op{{"switch", "p", "off"}, {"fork", "c", "p"}, {"switch", "c", "default"}}, "c",
			SessionRecord{Parent: "p"}, true},
		{"the child's own setting wins over a later fork", []op{{"switch", "c", "on"}, {"switch", "p", "off"}, {"fork", "c", "p"}}, "c",
			SessionRecord{Switch: "on", SwitchSource: SourceSession, Parent: "p"}, true},
		{"pool off is inherited too", []op{{"pool", "p", "off"}, {"fork", "c", "p"}}, "c",
			SessionRecord{Pool: "off", PoolSource: SourceInherited, Parent: "p"}, true},
		{"a cycle ends the walk", []op{{"fork", "a", "b"}, {"fork", "b", "a"}, {"fork", "c", "a"}}, "c",
			SessionRecord{Parent: "a"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSessions(nil)
			for _, o := range c.ops {
				var err error
				switch o.kind {
				case "switch":
					_, err = s.SetSwitch(o.id, o.value)
				case "pool":
					_, err = s.SetPool(o.id, o.value)
				case "fork":
					_, err = s.Fork(o.id, o.value)
				}
				if err != nil {
					t.Fatalf("%s %s %s: %v", o.kind, o.id, o.value, err)
				}
			}
			got, err := s.Get(c.id)
			if err != nil || got != c.want {
				t.Errorf("Get(%s) = %+v, %v; want %+v", c.id, got, err, c.want)
			}
			if e := enabled(got, Settings{DefaultEnabled: true}); e != c.enabled {
				t.Errorf("enabled = %v, want %v", e, c.enabled)
			}
		})
	}
}

func TestSessionForkSelf(t *testing.T) {
	if _, err := NewSessions(nil).Fork("s", "s"); !errors.Is(err, ErrSessionSetting) {
		t.Errorf("Fork(s, s) = %v", err)
	}
}

// failingStore refuses every save and, when loadErr is set, every load.
type failingStore struct {
	MemorySessionStore
	loadErr error
}

func (f *failingStore) LoadSession(id string) (SessionRecord, bool, error) {
	if f.loadErr != nil {
		return SessionRecord{}, false, f.loadErr
	}
	return f.MemorySessionStore.LoadSession(id)
}

func (f *failingStore) SaveSession(string, SessionRecord) error { return errors.New("disk full") }

func TestSessionStoreFailureDegradesToMemory(t *testing.T) {
	s := NewSessions(&failingStore{})
	rec, err := s.SetSwitch("s", "off")
	if !errors.Is(err, ErrSessionNotSaved) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("SetSwitch = %v, want ErrSessionNotSaved", err)
	}
	if rec.Switch != "off" {
		t.Errorf("record %+v", rec)
	}
	if got, _ := s.Get("s"); got.Switch != "off" {
		t.Errorf("the setting did not apply in memory: %+v", got)
	}
	// Through Router the switch still works.
	f := newPoolFixture(t, twoPools(), DefaultSettings())
	f.q = NewRouter(RouterOptions{Pools: f.q.Pools(), Settings: DefaultSettings(), Sessions: NewSessions(&failingStore{}), Clock: f.clock})
	if _, err := f.q.SetSwitch("s", "off"); !errors.Is(err, ErrSessionNotSaved) {
		t.Errorf("SetSwitch = %v", err)
	}
	if f.q.Enabled("s") {
		t.Error("the switch failed with the store")
	}

	// A store that cannot load: the defaults apply, and the error says so.
	s = NewSessions(&failingStore{loadErr: errors.New("corrupt")})
	if rec, err := s.Get("s"); err == nil || !rec.IsZero() {
		t.Errorf("Get = %+v, %v", rec, err)
	}
}

func TestSessionsPersistThroughTheStore(t *testing.T) {
	store := &MemorySessionStore{}
	s := NewSessions(store)
	mustSet(s.SetSwitch("s", "off"))
	mustSet(s.SetPool("s", "medium"))
	// A new Sessions on the same store (a restart) reads it back.
	got, err := NewSessions(store).Get("s")
	if err != nil || got.Switch != "off" || got.Pool != "medium" {
		t.Errorf("after restart: %+v, %v", got, err)
	}
	// Clearing both deletes the record.
	mustSet(s.SetSwitch("s", "default"))
	mustSet(s.SetPool("s", "default"))
	if _, ok, _ := store.LoadSession("s"); ok {
		t.Error("an empty record was kept")
	}
}
