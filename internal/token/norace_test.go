//go:build !race

package token

const raceOn = false
