package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/gatectl/gatectl/engine/retry"
	"github.com/redis/go-redis/v9"
)

// budgetTTL is how long a retry budget outlives its last save: longer than any
// turn, short enough that a session gone quiet leaves nothing behind.
const budgetTTL = 24 * time.Hour

// Budgets shares retry budgets between the instances: a session whose calls
// land on several instances spends one budget, not one per instance. Redis
// holds the shared record; local (the state file) keeps a copy, and answers
// while Redis does not. A round is spent in one Lua script (Spend) that checks
// the limit where the record lives: two instances planning a retry for the same
// session at the same instant cannot both spend the last round.
type Budgets struct {
	s     *Store
	local retry.BudgetStore
}

// Budgets returns the shared retry-budget store over local.
func (s *Store) Budgets(local retry.BudgetStore) *Budgets { return &Budgets{s: s, local: local} }

// Each named turn has its own record, so concurrent turns of one session never
// reset each other's rounds; provider names are config identifiers (no ':').
// The session is the client's, so its "}" (and "%", to keep that reversible) is
// escaped: the first "}" then ends it, and no session and turn can spell
// another's key.
func (s *Store) budgetKey(k retry.BudgetKey) string {
	key := s.opts.KeyPrefix + "budget:{" + sessionEscaper.Replace(k.Session) + "}:" + k.Provider
	if k.Turn != "" {
		key += ":turn:" + k.Turn
	}
	return key
}

// Load implements retry.BudgetStore: Redis's record, else the local one.
func (b *Budgets) Load(k retry.BudgetKey) (retry.Budget, bool, error) {
	var raw []byte
	err := b.s.call(func(ctx context.Context) error {
		var err error
		raw, err = b.s.c.Get(ctx, b.s.budgetKey(k)).Bytes()
		return err
	})
	if err == nil {
		var bud retry.Budget
		if json.Unmarshal(raw, &bud) == nil {
			return bud, true, nil
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) && !errors.Is(err, ErrDegraded) {
		b.s.log.Debug("shared retry budget unavailable; using the local record", "error", err)
	}
	return b.local.Load(k)
}

// Save implements retry.BudgetStore: the local record first (durable), then the
// shared one. A Redis failure is the store's to count; the retry goes on.
func (b *Budgets) Save(k retry.BudgetKey, bud retry.Budget) error {
	err := b.local.Save(k, bud)
	raw, _ := json.Marshal(bud)
	_ = b.s.call(func(ctx context.Context) error {
		return b.s.c.Set(ctx, b.s.budgetKey(k), raw, budgetTTL).Err()
	})
	return err
}

// Spend implements retry.BudgetSpender: one round spent atomically on Redis,
// then the record copied to the local store. With Redis down it spends on the
// local record alone (the planner holds the key's lock), as each instance did
// before it shared anything.
func (b *Budgets) Spend(k retry.BudgetKey, sp retry.BudgetSpend) (retry.Budget, bool, error) {
	var out []any
	err := b.s.call(func(ctx context.Context) error {
		var err error
		out, err = spendScript.Run(ctx, b.s.c, []string{b.s.budgetKey(k)}, sp.Turn, sp.Step, boolArg(sp.PerStep),
			sp.Counter, sp.Limit, sp.Kind, sp.KindLimit, sp.Now.Format(time.RFC3339Nano), budgetTTL.Milliseconds()).Slice()
		return err
	})
	var bud retry.Budget
	if err == nil && len(out) == 2 {
		spent, _ := out[0].(int64)
		raw, _ := out[1].(string)
		if json.Unmarshal([]byte(raw), &bud) == nil {
			if spent == 1 {
				_ = b.local.Save(k, bud) // spent and on record in Redis; the local copy is for Redis's absence
			}
			return bud, spent == 1, nil
		}
	}
	if err != nil && !errors.Is(err, ErrDegraded) {
		b.s.log.Debug("shared retry budget unavailable; spending on the local record", "error", err)
	}
	cur, found, lerr := b.local.Load(k)
	if lerr != nil {
		return bud, false, lerr
	}
	bud, ok := sp.Apply(cur, found)
	if ok {
		if err := b.local.Save(k, bud); err != nil {
			return bud, false, err
		}
	}
	return bud, ok, nil
}

var sessionEscaper = strings.NewReplacer("%", "%25", "}", "%7D")

func boolArg(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// PruneBudgets implements retry.BudgetPruner for the local records; Redis's
// expire by their TTL.
func (b *Budgets) PruneBudgets(before time.Time) (int, error) {
	if p, ok := b.local.(retry.BudgetPruner); ok {
		return p.PruneBudgets(before)
	}
	return 0, nil
}

var (
	_ retry.BudgetStore   = (*Budgets)(nil)
	_ retry.BudgetSpender = (*Budgets)(nil)
	_ retry.BudgetPruner  = (*Budgets)(nil)
)
