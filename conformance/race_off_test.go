//go:build !race

package conformance_test

// raceEnabled reports a build with the race detector.
const raceEnabled = false
