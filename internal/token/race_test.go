//go:build race

package token

// raceOn: the race detector's instrumentation makes values escape that
// otherwise stay on the stack, so allocation counts differ.
const raceOn = true
