//go:build !unix

package main

import "time"

// processCPU is not measured on this system: the reports show "-".
func processCPU() time.Duration { return 0 }
