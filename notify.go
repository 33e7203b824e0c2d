package dlm

import "context"

// A Notifier is a Node that can report messages published on a Redis
// channel (an optional ability, found by type assertion). Strategies use it
// to wake waiters when a lock is released.
type Notifier interface {
	Node
	// Watch subscribes to channel and returns once the server has confirmed
	// the subscription, so that every message published afterwards reaches
	// notify. notify is called with the message's payload; it must not block.
	// stop ends the subscription; calling it again does nothing. Messages
	// may be lost (for example while a connection is re-established), so a
	// caller must not rely on them alone.
	Watch(ctx context.Context, channel string, notify func(payload string)) (stop func(), err error)
}

// A ReleaseWatcher is a Strategy that can report that a key may have become
// free (an optional ability, found by type assertion). The Manager uses it to
// wake waiting Lock calls within about one round trip of a release instead
// of polling.
type ReleaseWatcher interface {
	Strategy
	// WatchRelease calls notify, which must not block, whenever the lock on
	// key may have been released. It returns once notifications are active.
	// When the strategy's nodes cannot notify, the error matches
	// errors.ErrUnsupported and the Manager polls instead. Notifications are
	// hints: they may be lost or spurious.
	WatchRelease(ctx context.Context, key string, notify func()) (stop func(), err error)
}
