package server

import (
	"encoding/json"
	"errors"
	"fmt"
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

// Bus fans events out to subscribers without ever waiting for one: Publish is
// called on the gate's and the API's hot paths, and a subscriber that reads
// slowly (or not at all) must cost them nothing but a bounded append.
//
// There are two kinds of subscribers. Channel subscribers (Subscribe) get Event
// values, for in-process listeners; an event that finds the channel full is
// dropped. Stream subscribers (SubscribeStream) are the HTTP event streams: the
// event is encoded once, for all of them, and appended to each stream's bounded
// queue, which the stream's goroutine drains in batches; an event that finds the
// queue full is counted as dropped and the stream says so. Streams are capped
// (api.maxSubscribers). A Bus is safe for concurrent use.
type Bus struct {
	maxStreams int // 0: no cap

	mu      sync.RWMutex
	subs    map[chan Event]struct{}
	streams map[*eventStream]struct{}
}

// ErrTooManySubscribers is SubscribeStream's answer past the cap.
var ErrTooManySubscribers = errors.New("too many event subscribers")

// NewBus returns an empty bus without a cap on streams.
func NewBus() *Bus { return NewBusCap(0) }

// NewBusCap returns an empty bus that holds at most maxStreams event streams.
func NewBusCap(maxStreams int) *Bus {
	return &Bus{maxStreams: maxStreams, subs: make(map[chan Event]struct{}), streams: make(map[*eventStream]struct{})}
}

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

// SubscribeStream opens an event stream holding at most queue encoded events;
// want selects the event types (nil: all). Past the cap it returns
// ErrTooManySubscribers. Close the stream when done.
func (b *Bus) SubscribeStream(queue int, want map[string]bool) (*eventStream, error) {
	st := &eventStream{bus: b, max: queue, want: want, notify: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.maxStreams > 0 && len(b.streams) >= b.maxStreams {
		return nil, fmt.Errorf("%w (at most %d, api.maxSubscribers)", ErrTooManySubscribers, b.maxStreams)
	}
	b.streams[st] = struct{}{}
	return st, nil
}

// Publish hands e to every subscriber that has room and returns at once.
func (b *Bus) Publish(e Event) {
	var rec []byte // encoded once, shared by every stream (read-only)
	b.mu.RLock()
	defer b.mu.RUnlock()
	for ch := range b.subs {
		select {
		case ch <- e:
		default:
		}
	}
	if len(b.streams) == 0 {
		return
	}
	data, err := json.Marshal(e)
	if err != nil {
		data, _ = json.Marshal(Event{Type: e.Type, At: e.At, Data: map[string]string{"error": "event not encodable: " + err.Error()}})
	}
	rec = fmt.Appendf(nil, "event: %s\ndata: %s\n\n", e.Type, data)
	for st := range b.streams {
		st.push(e.Type, rec)
	}
}

// CloseAll ends every subscription (their channels close, their streams end), so
// open event streams return at once when the server shuts down.
func (b *Bus) CloseAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
	for st := range b.streams {
		delete(b.streams, st)
		st.end()
	}
}

// Subscribers is the number of open subscriptions of both kinds.
func (b *Bus) Subscribers() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.subs) + len(b.streams)
}

// Streams is the number of open event streams.
func (b *Bus) Streams() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.streams)
}

// eventStream is one HTTP event stream's queue: encoded records appended by
// Publish, taken in batches by the stream's goroutine.
type eventStream struct {
	bus  *Bus
	max  int
	want map[string]bool // nil: every type

	notify chan struct{} // holds one token while records wait (or the stream ended)

	mu      sync.Mutex
	queue   [][]byte
	dropped int  // records that found the queue full since the last take
	ended   bool // closed by the bus (shutdown) or the stream itself
}

// push appends rec unless the stream filters its type out or is full. It never blocks.
func (st *eventStream) push(typ string, rec []byte) {
	if st.want != nil && !st.want[typ] {
		return
	}
	st.mu.Lock()
	switch {
	case st.ended:
	case len(st.queue) >= st.max:
		st.dropped++
	default:
		st.queue = append(st.queue, rec)
	}
	st.mu.Unlock()
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// take returns the records waiting, how many were dropped since the last take,
// and whether the stream has ended.
func (st *eventStream) take() (recs [][]byte, dropped int, ended bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	recs, dropped = st.queue, st.dropped
	st.queue, st.dropped = nil, 0
	return recs, dropped, st.ended
}

// Ready is signalled when records wait or the stream has ended.
func (st *eventStream) Ready() <-chan struct{} { return st.notify }

func (st *eventStream) end() {
	st.mu.Lock()
	st.ended = true
	st.queue = nil
	st.mu.Unlock()
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// Close ends the stream and leaves the bus.
func (st *eventStream) Close() {
	st.bus.mu.Lock()
	delete(st.bus.streams, st)
	st.bus.mu.Unlock()
	st.end()
}
