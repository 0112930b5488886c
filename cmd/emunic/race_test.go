//go:build race

package main

// raceEnabled: the race detector's scheduler shuffles runnable goroutines
// on purpose, and a deterministic run's serialisation of the hosts is not
// yet complete against that (docs/trace.md, "Deterministic runs").
const raceEnabled = true
