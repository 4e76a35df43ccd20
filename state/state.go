// Package state keeps what must survive a restart — per-session settings (the
// quota switch and pool) and retry budgets (so a reconnect continues them) — in
// one bbolt file under the config's stateDir.
//
// Every write is one bbolt transaction, fsynced before it returns: a record is
// either wholly on disk or not at all, and a process killed mid-write (kill -9,
// power loss) reopens to the last committed state. A missing file is a fresh
// start; a file that is not a gatectl state file, is damaged, or was cut
// short (0 bytes, or fewer pages than its header counts), is refused with an
// error naming it (ErrCorrupt), never a crash — also when it is cut short under
// the running process. Route state (readings, marks,
// each session's current route) is not kept here: it is short-lived, cheap to
// learn again and misleading once stale, so it lives in memory.
package state

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/gatectl/gatectl/engine/pool"
	"github.com/gatectl/gatectl/engine/retry"
)

// FileName is the state file's name inside stateDir.
const FileName = "gatectl.db"

// schemaVersion is the layout this package writes. A file with a higher version was
// written by a newer gatectl and is refused rather than misread.
const schemaVersion = 1

// Buckets.
var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions") // session id -> JSON pool.SessionRecord
	bucketBudgets  = []byte("budgets")  // budgetKey(retry.BudgetKey) -> JSON engine.retry.Budget
	// bucketSettings holds the runtime settings: config section name -> the JSON
	// the settings package writes. Added without a schema bump: a file without
	// the bucket gets it on open, and an older gatectl ignores it.
	bucketSettings = []byte("settings")
	keySchema      = []byte("schema")
)

// Errors Open reports, wrapped with the file's path.
var (
	// ErrCorrupt: the file is not a readable gatectl state file. Moving it aside
	// starts afresh (session settings, budgets and runtime settings are lost, nothing else).
	ErrCorrupt = errors.New("state file is corrupt")
	// ErrLocked: another process holds the file open.
	ErrLocked = errors.New("state file is in use by another process")
	// ErrNewer: the file was written by a newer gatectl.
	ErrNewer = errors.New("state file was written by a newer gatectl")
)

// errEmpty is the detail of the ErrCorrupt a 0-byte file gets.
var errEmpty = errors.New("the file is empty (0 bytes)")

// lockTimeout bounds the wait for another process's lock on the file.
var lockTimeout = 2 * time.Second

// Store is the bbolt-backed store. It implements pool.SessionStore,
// retry.BudgetStore and retry.BudgetPruner. Safe for concurrent use; writes are
// serialised by bbolt.
type Store struct {
	db   *bolt.DB
	path string
	now  func() time.Time // stamps a session record's use (SetClock)
}

// SetClock gives the store the daemon's clock for the times it records.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// Open opens (creating when missing) the state file FileName in dir, creating dir
// too. See OpenFile.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("state: no state directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: create %s: %w", dir, err)
	}
	return OpenFile(filepath.Join(dir, FileName))
}

// OpenFile opens the state file at path, creating it when missing, and checks it
// through: a damaged file gives ErrCorrupt naming path, never a panic.
func OpenFile(path string) (st *Store, err error) {
	// bbolt initialises a 0-byte file as a new database, which would silently drop
	// every session setting and budget a truncated file held: it is refused like
	// any other damaged file. (bbolt writes a new file's first pages and fsyncs
	// them before Open returns, so no file gatectl made is ever left empty.)
	if info, serr := os.Stat(path); serr == nil {
		switch {
		case info.IsDir():
			return nil, fmt.Errorf("state: open %s: it is a directory, not a state file", path)
		case info.Mode().IsRegular() && info.Size() == 0:
			return nil, corrupt(path, errEmpty)
		}
		if err := checkLength(path, info.Size()); err != nil {
			return nil, corrupt(path, err)
		}
	}
	var db *bolt.DB
	// A page past the end of a file cut short faults when it is read (SIGBUS):
	// fatal to the whole process unless the runtime turns it into a panic.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil { // bbolt panics on some damaged pages, and on a fault
			if db != nil {
				db.Close()
			}
			st, err = nil, corrupt(path, fmt.Errorf("%v", r))
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			return nil, fmt.Errorf("state: open %s: %w (waited %s for its lock)", path, ErrLocked, lockTimeout)
		case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
			errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
			return nil, corrupt(path, err)
		}
		if _, statErr := os.Stat(path); statErr == nil && !errors.Is(err, os.ErrPermission) {
			// The file exists and bbolt could not make sense of it (too small, a bad
			// page size, …): damage, not an I/O problem.
			return nil, corrupt(path, err)
		}
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	if err := check(db); err != nil {
		db.Close()
		return nil, corrupt(path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keySchema); v != nil {
			n, perr := strconv.Atoi(string(v))
			if perr != nil {
				return fmt.Errorf("%w: schema %q", ErrCorrupt, v)
			}
			if n > schemaVersion {
				return fmt.Errorf("%w (schema %d; this one reads up to %d)", ErrNewer, n, schemaVersion)
			}
		} else if err := meta.Put(keySchema, []byte(strconv.Itoa(schemaVersion))); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketSessions, bucketBudgets, bucketSettings} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	return &Store{db: db, path: path, now: time.Now}, nil
}

// The fields of a bbolt meta page this package reads (bbolt's file format: a
// 16-byte page header, then the meta: magic, version, page size, flags, root
// bucket (16 bytes), freelist page, the high-water mark of pages, txid).
const (
	boltMagic        = 0xED0CDAED
	metaMagicAt      = 16
	metaPageSizeAt   = 24
	metaHighWaterAt  = 56
	metaTxidAt       = 64
	metaPageMinBytes = 72
)

// checkLength refuses a file shorter than its newest meta page says it is: a
// copy or a disk cut short. Its missing pages would be read through the
// memory map, where a read past the end of the file is a fault, not an error.
func checkLength(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // Open says why
	}
	defer f.Close()
	var first [metaPageMinBytes]byte
	if _, err := f.ReadAt(first[:], 0); err != nil || binary.LittleEndian.Uint32(first[metaMagicAt:]) != boltMagic {
		return nil // not a bbolt file at all: Open says so
	}
	pageSize := int64(binary.LittleEndian.Uint32(first[metaPageSizeAt:]))
	if pageSize < 512 || pageSize > 1<<20 {
		return nil
	}
	var txid, pages uint64
	for i := int64(0); i < 2; i++ {
		var m [metaPageMinBytes]byte
		if _, err := f.ReadAt(m[:], i*pageSize); err != nil || binary.LittleEndian.Uint32(m[metaMagicAt:]) != boltMagic {
			continue
		}
		if t := binary.LittleEndian.Uint64(m[metaTxidAt:]); t >= txid {
			txid, pages = t, binary.LittleEndian.Uint64(m[metaHighWaterAt:])
		}
	}
	if want := int64(pages) * pageSize; pages > 0 && pages < 1<<40 && size < want {
		return fmt.Errorf("the file was cut short: %d bytes, its header says %d", size, want)
	}
	return nil
}

// check runs bbolt's consistency check over the whole file. It reads the
// pages on a goroutine of bbolt's own, where a fault is fatal whatever
// SetPanicOnFault says: checkLength must have passed first.
func check(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			if len(errs) < 5 {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

func corrupt(path string, err error) error {
	return fmt.Errorf("state: open %s: %w: %w (move the file aside to start afresh: session settings, retry budgets and runtime settings are lost, nothing else)", path, ErrCorrupt, err)
}

// Path returns the state file's path.
func (s *Store) Path() string { return s.path }

// Close closes the file. The Store is unusable afterwards.
func (s *Store) Close() error { return s.db.Close() }

// Check runs bbolt's consistency check over the file (what Open does).
func (s *Store) Check() (err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	// bbolt's check reads the pages on a goroutine of its own, where a fault
	// is no panic: a file cut short is told by its length first.
	if info, serr := os.Stat(s.path); serr == nil {
		if err := checkLength(s.path, info.Size()); err != nil {
			return corrupt(s.path, err)
		}
	}
	if err := check(s.db); err != nil {
		return corrupt(s.path, err)
	}
	return nil
}

// guard turns a bbolt panic on a damaged page into an error naming the file;
// so too a fault reading a page the file no longer holds (cut short under the
// running process), which the caller's debug.SetPanicOnFault(true) makes a
// panic rather than a crash of the whole process. It restores panicOnFault.
func (s *Store) guard(err *error, panicOnFault bool) {
	debug.SetPanicOnFault(panicOnFault)
	if r := recover(); r != nil {
		*err = fmt.Errorf("state: %s: %w: %v", s.path, ErrCorrupt, r)
	}
}

// storedSession is a session record as the file holds it: with when the session
// last used it (a change, or a call: TouchSessions), so a record nobody uses
// can go (PruneSessions). An older gatectl reads the record and ignores the time.
type storedSession struct {
	pool.SessionRecord
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// touchEvery: a session in use has its record's time moved at most this often,
// so a busy session costs a write a day, not one a call.
const touchEvery = 24 * time.Hour

// TouchSessions records that the sessions ids are in use at now: the records
// of those that have one, stamped more than touchEvery ago, are stamped now.
// One transaction.
func (s *Store) TouchSessions(ids []string, now time.Time) (err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	var due []string // read first: most passes write nothing, and a write is an fsync
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		for _, id := range ids {
			var st storedSession
			if v := b.Get([]byte(id)); v != nil && json.Unmarshal(v, &st) == nil && now.Sub(st.LastUsed) >= touchEvery {
				due = append(due, id)
			}
		}
		return nil
	})
	if err != nil || len(due) == 0 {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		for _, id := range due {
			v := b.Get([]byte(id))
			if v == nil {
				continue
			}
			var st storedSession
			if json.Unmarshal(v, &st) != nil || now.Sub(st.LastUsed) < touchEvery {
				continue
			}
			st.LastUsed = now.UTC()
			nv, err := json.Marshal(st)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(id), nv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("state: %s: touch sessions: %w", s.path, err)
	}
	return nil
}

// PruneSessions deletes the session records last used before before and
// returns their ids. A record from before the file kept the time is stamped
// now instead: it gets the whole span from this gatectl on.
func (s *Store) PruneSessions(before time.Time) (ids []string, err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	now := s.now().UTC()
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		var stamp [][2][]byte
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var st storedSession
			if json.Unmarshal(v, &st) != nil {
				continue // LoadSession says what is wrong with it
			}
			switch {
			case st.LastUsed.IsZero():
				st.LastUsed = now
				nv, err := json.Marshal(st)
				if err != nil {
					return err
				}
				stamp = append(stamp, [2][]byte{append([]byte(nil), k...), nv})
			case st.LastUsed.Before(before):
				ids = append(ids, string(k))
			}
		}
		for _, kv := range stamp {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		for _, id := range ids {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state: %s: prune sessions: %w", s.path, err)
	}
	return ids, nil
}

// LoadSession implements pool.SessionStore.
func (s *Store) LoadSession(id string) (rec pool.SessionRecord, ok bool, err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	err = s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSessions).Get([]byte(id))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &rec)
	})
	if err != nil {
		return pool.SessionRecord{}, false, fmt.Errorf("state: %s: session %q: %w", s.path, id, err)
	}
	return rec, ok, nil
}

// SaveSession implements pool.SessionStore: one fsynced transaction. A zero
// record deletes the session's entry.
func (s *Store) SaveSession(id string, rec pool.SessionRecord) (err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	if id == "" {
		return errors.New("state: empty session id")
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		if rec.IsZero() {
			return b.Delete([]byte(id))
		}
		v, err := json.Marshal(storedSession{rec, s.now().UTC()})
		if err != nil {
			return err
		}
		return b.Put([]byte(id), v)
	})
	if err != nil {
		return fmt.Errorf("state: %s: save session %q: %w", s.path, id, err)
	}
	return nil
}

// Sessions returns how many session records the file holds.
func (s *Store) Sessions() (n int, err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	err = s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketSessions).Stats().KeyN
		return nil
	})
	return n, err
}

// budgetKey encodes a budget key: the session's length as a uvarint, the session,
// the provider's length as a uvarint, the provider, then the turn — unambiguous
// whatever bytes each holds. (Records of the older key without the turn are never
// read again; the janitor prunes them by age.)
func budgetKey(k retry.BudgetKey) []byte {
	b := make([]byte, 0, 4+len(k.Session)+len(k.Provider)+len(k.Turn))
	b = binary.AppendUvarint(b, uint64(len(k.Session)))
	b = append(b, k.Session...)
	b = binary.AppendUvarint(b, uint64(len(k.Provider)))
	b = append(b, k.Provider...)
	return append(b, k.Turn...)
}

// Load implements retry.BudgetStore.
func (s *Store) Load(k retry.BudgetKey) (b retry.Budget, ok bool, err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	err = s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketBudgets).Get(budgetKey(k))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &b)
	})
	if err != nil {
		return retry.Budget{}, false, fmt.Errorf("state: %s: budget %s/%s/%s: %w", s.path, k.Session, k.Turn, k.Provider, err)
	}
	return b, ok, nil
}

// Save implements retry.BudgetStore: one fsynced transaction.
func (s *Store) Save(k retry.BudgetKey, b retry.Budget) (err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	v, err := json.Marshal(b)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBudgets).Put(budgetKey(k), v)
	})
	if err != nil {
		return fmt.Errorf("state: %s: save budget %s/%s/%s: %w", s.path, k.Session, k.Turn, k.Provider, err)
	}
	return nil
}

// PruneBudgets implements retry.BudgetPruner: it drops every budget saved before
// before (and any record it cannot read) in one transaction.
func (s *Store) PruneBudgets(before time.Time) (n int, err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketBudgets)
		var drop [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var rb retry.Budget
			if json.Unmarshal(v, &rb) != nil || rb.UpdatedAt.Before(before) {
				drop = append(drop, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(drop)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("state: %s: prune budgets: %w", s.path, err)
	}
	return n, nil
}

// LoadSettings returns every saved runtime settings record, by section.
func (s *Store) LoadSettings() (out map[string][]byte, err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	out = map[string][]byte{}
	err = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSettings).ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("state: %s: load settings: %w", s.path, err)
	}
	return out, nil
}

// SaveSettings stores section's runtime settings record in one fsynced
// transaction; nil deletes it.
func (s *Store) SaveSettings(section string, v []byte) (err error) {
	defer s.guard(&err, debug.SetPanicOnFault(true))
	if section == "" {
		return errors.New("state: empty settings section")
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSettings)
		if v == nil {
			return b.Delete([]byte(section))
		}
		return b.Put([]byte(section), v)
	})
	if err != nil {
		return fmt.Errorf("state: %s: save settings %q: %w", s.path, section, err)
	}
	return nil
}

var (
	_ pool.SessionStore  = (*Store)(nil)
	_ retry.BudgetStore  = (*Store)(nil)
	_ retry.BudgetPruner = (*Store)(nil)
)
