//go:build race

package sim

// raceOn: under the race detector a run takes tens of times the CPU (40
// seeds took 50s of CPU), so TestSeeds' default batch is smaller.
const raceOn = true
