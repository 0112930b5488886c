//go:build race

package delegation

const raceEnabled = true
