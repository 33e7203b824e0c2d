package dlm

import "time"

// RenewBatchForTest exposes renewBatch to the external tests.
const RenewBatchForTest = renewBatch

// RememberForTest ends a queue of key that saw fence, as the last waiter
// leaving does, and returns how many keys m remembers.
func RememberForTest(m *Manager, key string, fence uint64) int {
	qs := m.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.rememberLocked(&queue{key: key, lastFence: fence})
	return len(qs.seen)
}

// AgeMemoryForTest moves back by d the end of every queue m remembers.
func AgeMemoryForTest(m *Manager, d time.Duration) {
	qs := m.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for k, s := range qs.seen {
		s.ended = s.ended.Add(-d)
		qs.seen[k] = s
	}
}

// ContextMadeForTest reports whether l has made its Context or the timer
// that ends it.
func ContextMadeForTest(l *Lock) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx != nil || l.timer != nil
}

// ParkedForTest reports whether the first Lock call m has waiting for key
// is parked: in the queue and neither woken nor attempting, so that an
// Unlock now hands it the lock.
func ParkedForTest(m *Manager, key string) bool {
	qs := m.queues
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.q[key]
	return q != nil && len(q.waiters) > 0 && !q.waiters[0].trying
}

// NewTokenForTest returns a token as a Manager with owner and ttl makes it.
func NewTokenForTest(owner string, ttl time.Duration) string {
	return (&queues{owner: owner, ttl: ttl}).newToken()
}
