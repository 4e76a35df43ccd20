package gate

// Reason says why the waiter is held back — cooldown, tpm, rpm, session-cap or
// queue — as the gate's "wait" event reports it. The decision API answers it to a
// call that asked not to wait (or stopped waiting) before it was granted.
func (w *Waiter) Reason() string {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	return w.reason
}
