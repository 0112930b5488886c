package lwfuse_test

import (
	"testing"

	"github.com/emunic/emunic/board"
)

// TestMain lets this test binary serve as a split host's device process
// (EMUNIC_SPLIT=1 re-runs it as one for each host).
func TestMain(m *testing.M) { board.RunTests(m) }
