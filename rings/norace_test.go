//go:build !race

package rings

const raceEnabled = false
