//go:build !race

package dlm_test

const raceOn = false
