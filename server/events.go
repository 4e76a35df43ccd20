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
// slowly (or not at all) must cost them nothing.
//
// There are two kinds of subscribers. Channel subscribers (Subscribe) get Event
// values, for in-process listeners; an event that finds the channel full is
// dropped. Stream subscribers (SubscribeStream) are the HTTP event streams, and
// cost Publish nothing per stream: the event is encoded once into a ring of the
// last eventsLog records that every stream reads at its own cursor, and one
// channel close wakes the streams waiting for the next record. A stream that
// falls more than the ring behind loses the oldest records and is told how
// many. Streams are capped (api.maxSubscribers). A Bus is safe for concurrent use.
type Bus struct {
	maxStreams int // 0: no cap

	mu      sync.Mutex
	subs    map[chan Event]struct{}
	streams int
	ring    [][]byte      // the last len(ring) records; record seq is at ring[seq%len(ring)]
	types   []string      // the event type of each ring slot
	next    uint64        // seq of the next record
	wake    chan struct{} // closed by the next Publish (or CloseAll); nil when nobody waits
	closed  bool          // CloseAll ran: every stream ends
}

// eventsLog is how many records the ring keeps: how far a stream may fall
// behind before it loses events.
const eventsLog = 4096

// ErrTooManySubscribers is SubscribeStream's answer past the cap.
var ErrTooManySubscribers = errors.New("too many event subscribers")

// NewBus returns an empty bus without a cap on streams.
func NewBus() *Bus { return NewBusCap(0) }

// NewBusCap returns an empty bus that holds at most maxStreams event streams.
func NewBusCap(maxStreams int) *Bus {
	return &Bus{maxStreams: maxStreams, subs: make(map[chan Event]struct{}),
		ring: make([][]byte, eventsLog), types: make([]string, eventsLog)}
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

// SubscribeStream opens an event stream that starts at the next event; want
// selects the event types (nil: all). Past the cap it returns
// ErrTooManySubscribers. Close the stream when done.
func (b *Bus) SubscribeStream(want map[string]bool) (*eventStream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.maxStreams > 0 && b.streams >= b.maxStreams {
		return nil, fmt.Errorf("%w (at most %d, api.maxSubscribers)", ErrTooManySubscribers, b.maxStreams)
	}
	b.streams++
	return &eventStream{bus: b, want: want, cursor: b.next}, nil
}

// Publish hands e to every subscriber and returns at once.
func (b *Bus) Publish(e Event) {
	b.mu.Lock()
	for ch := range b.subs {
		select {
		case ch <- e:
		default:
		}
	}
	streams := b.streams
	b.mu.Unlock()
	if streams == 0 { // nobody to encode for (a stream opened meanwhile starts after this event)
		return
	}
	data, err := json.Marshal(e) // outside the lock: the costly part
	if err != nil {
		data, _ = json.Marshal(Event{Type: e.Type, At: e.At, Data: map[string]string{"error": "event not encodable: " + err.Error()}})
	}
	rec := fmt.Appendf(nil, "event: %s\ndata: %s\n\n", e.Type, data)
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.next % uint64(len(b.ring))
	b.ring[i], b.types[i] = rec, e.Type
	b.next++
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
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
	b.closed = true
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// Subscribers is the number of open subscriptions of both kinds.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs) + b.streams
}

// Streams is the number of open event streams.
func (b *Bus) Streams() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams
}

// closedChan is ready at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// eventStream is one HTTP event stream's place in the bus's ring. It is used by
// the one goroutine serving the stream.
type eventStream struct {
	bus    *Bus
	want   map[string]bool // nil: every type
	cursor uint64          // seq of the next record this stream reads
	done   bool
}

// Ready is closed when records past the stream's cursor exist or the bus closed.
func (st *eventStream) Ready() <-chan struct{} {
	b := st.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.next > st.cursor {
		return closedChan
	}
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return b.wake
}

// take returns the records past the cursor that the stream wants, how many were
// lost because the stream fell more than the ring behind, and whether the bus
// has closed. The records are shared: read them, never change them.
func (st *eventStream) take() (recs [][]byte, dropped int, ended bool) {
	b := st.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, 0, true
	}
	size := uint64(len(b.ring))
	if b.next-st.cursor > size {
		dropped = int(b.next - size - st.cursor)
		st.cursor = b.next - size
	}
	for ; st.cursor < b.next; st.cursor++ {
		i := st.cursor % size
		if st.want == nil || st.want[b.types[i]] {
			recs = append(recs, b.ring[i])
		}
	}
	return recs, dropped, false
}

// Close leaves the bus.
func (st *eventStream) Close() {
	if st.done {
		return
	}
	st.done = true
	st.bus.mu.Lock()
	st.bus.streams--
	st.bus.mu.Unlock()
}
