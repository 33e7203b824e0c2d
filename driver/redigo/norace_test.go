//go:build !race

package redigo_test

const raceOn = false
