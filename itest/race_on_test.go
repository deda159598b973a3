//go:build race

package itest

const raceEnabled = true
