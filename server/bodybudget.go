package server

// The body budget: one cap (server.maxBufferedBytes) on the bytes of request and
// response bodies gatectl holds in memory at once, across every request.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// bufferWait is how long a request waits for room in the body budget before it
// is refused with 503: long enough to ride out a burst of big bodies finishing,
// short enough that a client learns at once that gatectl is full.
const bufferWait = 2 * time.Second

// requestShare is the part of the budget request bodies may take together. The
// rest is kept for the responses of the requests already in: they hold their
// request bodies while they read an answer, so if requests could take it all,
// every answer would wait on requests that wait on answers.
const requestShare = 0.75

// errBudgetFull: no room in the body budget within the wait.
var errBudgetFull = errors.New("body budget full")

// errTooLarge is a body over its limit.
type errTooLarge struct {
	what  string
	limit int64
	size  int64 // the declared or read size; at least limit+1
}

func (e *errTooLarge) Error() string {
	return fmt.Sprintf("%s is over gatectl's limit of %d bytes (%s; got %d or more)", e.what, e.limit, sizeText(e.limit), e.size)
}

func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// bodyBudget is a semaphore weighted by bytes. Each acquire names the most the
// budget may hold after it (its ceiling): requests use a lower ceiling than
// responses (requestShare). Waiters are granted in order as releases make room
// under their ceilings; one that does not fit does not block the ones behind it.
// Safe for concurrent use.
type bodyBudget struct {
	max     int64
	mu      sync.Mutex
	used    int64 // bytes held now; ≤ max
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n, ceiling int64
	ready      chan struct{} // closed when granted
}

func newBodyBudget(max int64) *bodyBudget { return &bodyBudget{max: max} }

// ceiling is the budget's cap for requests or responses.
func (b *bodyBudget) ceiling(request bool) int64 {
	if request {
		return int64(float64(b.max) * requestShare)
	}
	return b.max
}

// acquire takes n bytes (at most the ceiling: a body larger than the whole
// budget runs alone) and waits until they fit under the ceiling or ctx ends.
func (b *bodyBudget) acquire(ctx context.Context, n int64, request bool) (int64, error) {
	ceiling := b.ceiling(request)
	n = min(n, ceiling)
	if n <= 0 {
		return 0, nil
	}
	b.mu.Lock()
	if b.used+n <= ceiling {
		b.used += n
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ceiling: ceiling, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.used -= n
			b.grantLocked()
		default:
			for i, o := range b.waiters {
				if o == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
		}
		return 0, errBudgetFull
	}
}

// acquireWithin is acquire waiting at most wait.
func (b *bodyBudget) acquireWithin(ctx context.Context, wait time.Duration, n int64, request bool) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return b.acquire(ctx, n, request)
}

// release gives back n bytes taken by acquire.
func (b *bodyBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.grantLocked()
}

func (b *bodyBudget) grantLocked() {
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if b.used+w.n <= w.ceiling {
			b.used += w.n
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
}

// inUse is the bytes held now.
func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// budgetedBody is a body read into memory and the budget bytes it holds.
type budgetedBody struct {
	b       []byte
	charged int64
}

// readBudgeted reads r whole into memory, taking budget bytes as the buffer grows
// (all at once when declared, the announced length, is known). Past limit it
// fails with *errTooLarge, before reading anything when declared is already over;
// with truncate it keeps the first limit bytes instead. Each wait for room lasts
// at most wait, or until ctx ends (errBudgetFull either way). The caller
// releases res.charged.
func (b *bodyBudget) readBudgeted(ctx context.Context, wait time.Duration, r io.Reader, declared, limit int64, request, truncate bool, what string) (res budgetedBody, err error) {
	if declared > limit && !truncate {
		return res, &errTooLarge{what: what, limit: limit, size: declared}
	}
	size := int64(64 << 10)
	if declared >= 0 {
		size = declared + 1 // +1: the read that sees the end needs room
	}
	size = min(size, limit+1)
	defer func() {
		if err != nil {
			b.release(res.charged)
			res = budgetedBody{}
		}
	}()
	if res.charged, err = b.acquireWithin(ctx, wait, size, request); err != nil {
		return res, err
	}
	// The body grows in chunks, each as large as all before it, and is joined
	// once it is known to fit. An answer over the limit is refused having
	// allocated the limit's worth of memory, where doubling one buffer (and
	// copying it at each step) allocated about three times that, and held one
	// and a half at its peak. On a VM whose pages fault in slowly on first
	// touch, that was seconds for three 65 MiB answers at once
	// (docs/faults.md, "Findings"). The join's copy is not charged, as the
	// doubling's old buffer was not: it holds up to the body's length more for
	// a moment (doubling held half the final buffer), and the chunks are
	// garbage once it is made.
	var chunks [][]byte
	var total int64 // bytes in chunks
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if total+int64(len(buf)) > limit {
				break
			}
			// Only the new chunk is taken, as large as the body so far.
			next := min(total+int64(len(buf)), limit+1-total-int64(len(buf)))
			got, err := b.acquireWithin(ctx, wait, next, request)
			if err != nil {
				return res, err
			}
			res.charged += got
			chunks = append(chunks, buf)
			total += int64(len(buf))
			buf = make([]byte, 0, next)
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return res, rerr
		}
	}
	read := total + int64(len(buf))
	if read > limit && !truncate {
		return res, &errTooLarge{what: what, limit: limit, size: read}
	}
	if len(chunks) > 0 {
		whole := make([]byte, 0, min(read, limit))
		for _, c := range append(chunks, buf) {
			whole = append(whole, c[:min(int64(len(c)), int64(cap(whole)-len(whole)))]...)
		}
		buf = whole
	}
	if int64(len(buf)) > limit {
		buf = buf[:limit]
	}
	res.b = buf
	return res, nil
}
