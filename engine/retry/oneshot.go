package retry

import (
	"sync"
	"time"
)

// One-shot turns: a request that names no turn is a turn of its own
// (Request.OneShot). Its budget is needed only while the request runs, on the
// instance that runs it, so it is kept here in memory, never in the
// BudgetStore: a store would gain a record per request, and the session's
// other requests would find it there.

// The bounds of the one-shot budgets. Each request that failed at least once
// and is still running holds one entry, dropped when it ends (EndTurn); the
// bounds only catch a caller that never ends its turns.
const (
	// maxOneShotTurns is how many one-shot turns may hold a budget at once.
	maxOneShotTurns = 1 << 16
	// oneShotIdle is how long a one-shot budget unsaved is presumed abandoned
	// when the map is full: longer than a request is held between two failures.
	oneShotIdle = time.Hour
)

// turnID names one turn of one session.
type turnID struct{ session, turn string }

// oneShotBudgets holds the one-shot turns' budgets, by turn and then provider (a
// failover moves a request to another provider within its turn). Its zero value
// is empty and ready; it is safe for concurrent use.
type oneShotBudgets struct {
	mu sync.Mutex
	m  map[turnID]map[string]Budget
}

func (o *oneShotBudgets) load(k BudgetKey) (Budget, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[turnID{k.Session, k.Turn}][k.Provider]
	return b, ok
}

// save stores b under k. A new turn at the bound first drops the turns idle for
// oneShotIdle, then, if none was, the least recently saved one: that request's
// budget starts afresh, which the attempt backstop still bounds.
func (o *oneShotBudgets) save(k BudgetKey, b Budget) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := turnID{k.Session, k.Turn}
	byProvider, ok := o.m[id]
	if !ok {
		if o.m == nil {
			o.m = make(map[turnID]map[string]Budget)
		}
		if len(o.m) >= maxOneShotTurns {
			o.evict(b.UpdatedAt)
		}
		byProvider = make(map[string]Budget, 1)
		o.m[id] = byProvider
	}
	byProvider[k.Provider] = b
}

// evict makes room for one turn. Requires o.mu.
func (o *oneShotBudgets) evict(now time.Time) {
	if o.pruneLocked(now.Add(-oneShotIdle)) > 0 {
		return
	}
	var oldest turnID
	var oldestAt time.Time
	first := true
	for id, byProvider := range o.m {
		if at := lastSaved(byProvider); first || at.Before(oldestAt) {
			oldest, oldestAt, first = id, at, false
		}
	}
	delete(o.m, oldest)
}

// end drops session's turn.
func (o *oneShotBudgets) end(session, turn string) {
	o.mu.Lock()
	delete(o.m, turnID{session, turn})
	o.mu.Unlock()
}

// prune drops the turns not saved since before.
func (o *oneShotBudgets) prune(before time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pruneLocked(before)
}

func (o *oneShotBudgets) pruneLocked(before time.Time) int {
	n := 0
	for id, byProvider := range o.m {
		if lastSaved(byProvider).Before(before) {
			delete(o.m, id)
			n++
		}
	}
	return n
}

func (o *oneShotBudgets) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// lastSaved is when a turn's budgets were last saved.
func lastSaved(byProvider map[string]Budget) time.Time {
	var at time.Time
	for _, b := range byProvider {
		if b.UpdatedAt.After(at) {
			at = b.UpdatedAt
		}
	}
	return at
}

// EndTurn drops the budgets of session's one-shot turn (Request.OneShot): the
// request that was the turn has ended. Call it once the request is answered,
// whatever the outcome; a turn the planner holds nothing for is fine.
func (p *Planner) EndTurn(session, turn string) { p.oneShot.end(session, turn) }

// OneShotTurns returns how many one-shot turns hold a budget: requests that
// failed at least once and have not ended.
func (p *Planner) OneShotTurns() int { return p.oneShot.len() }
