package server

import (
	"sync"
	"time"
)

// Event is one item of the decision API's event stream (GET /gate/v1/events):
// waits with their expected length, 429s, learner steps, failovers, long-term
// waits entered and left, reloads.
type Event struct {
	Type string    `json:"type"`
	At   time.Time `json:"at"`
	Data any       `json:"data"`
}

// Bus fans events out to subscribers. A slow subscriber loses events rather than
// slowing the gate: each has a bounded buffer and Publish never blocks.
type Bus struct {
	mu      sync.Mutex
	subs    map[chan Event]struct{}
	dropped uint64
}

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{subs: make(map[chan Event]struct{})} }

// Subscribe returns a channel of events and a function that ends the subscription.
func (b *Bus) Subscribe(buffer int) (<-chan Event, func()) {
	ch := make(chan Event, buffer)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		if _, ok := b.subs[ch]; ok {
			delete(b.subs, ch)
			close(ch)
		}
		b.mu.Unlock()
	}
}

// Publish sends e to every subscriber that has room.
func (b *Bus) Publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- e:
		default:
			b.dropped++
		}
	}
}

// CloseAll ends every subscription (their channels close), so open event streams
// return at once when the server shuts down.
func (b *Bus) CloseAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
}

// Subscribers is the number of open subscriptions.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}
