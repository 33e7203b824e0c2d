//go:build race

package sim

// raceOn: under the race detector runs are about eight times slower, so
// TestSeeds' default batch is smaller.
const raceOn = true
