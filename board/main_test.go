package board

import "testing"

func TestMain(m *testing.M) { RunTests(m) }
