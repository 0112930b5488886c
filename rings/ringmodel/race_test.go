//go:build race

package ringmodel

// raceEnabled scales the exploration down: the race detector makes the
// checker and the real calls an order of magnitude slower.
const raceEnabled = true
