//go:build !unix

package cpusplit

import "time"

// Process is not measured on this system: always 0 (reports show "-").
func Process() time.Duration { return 0 }
