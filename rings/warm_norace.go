//go:build !race

package rings

// warmEnabled: see warm_race.go.
const warmEnabled = true
