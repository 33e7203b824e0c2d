//go:build race

package strategy

const raceOn = true
