//go:build !race

package ringmodel

const raceEnabled = false
