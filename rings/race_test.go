//go:build race

package rings

// raceEnabled scales the property tests down: the race detector makes every
// shared-memory access an order of magnitude slower.
const raceEnabled = true
