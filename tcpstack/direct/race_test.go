//go:build race

package direct

// raceEnabled scales the long tests down: the race detector makes them
// several times slower (CI runs this package under it without -short).
const raceEnabled = true
