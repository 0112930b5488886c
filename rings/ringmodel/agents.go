package ringmodel

import "github.com/emunic/emunic/rings"

// The standard agents follow docs/rings.md step by step and mirror the Go
// code in package rings and its two users: every step is one shared access
// of rings.Producer, rings.Consumer or of the driver or device loop that
// calls them, in the same order, and Step.Call names the call it begins
// (conformance_test.go replays those calls on the real code). Private
// copies of the peer's index are kept as the Go code keeps them, so a
// step loads a shared index exactly where the Go code does.

// Fault is a deliberate departure from the protocol, for showing that the
// checker catches it (and for checking a checker set up for another
// implementation). The zero value is the protocol of docs/rings.md.
type Fault uint32

const (
	// NoRecheck: after setting NEED_WAKEUP, sleep without re-reading the
	// peer's index (or, waiting for a command, its control word).
	NoRecheck Fault = 1 << iota
	// FlagBeforeIndex: load the peer's flags before storing the index
	// (publish, release; the device's interrupt decision), not after.
	FlagBeforeIndex
	// NoReleaseBeforePark: the consumer parks without releasing the
	// entries it has consumed.
	NoReleaseBeforePark
	// NoPublishBeforeWait: the producer waits for space without publishing
	// the entries it has committed.
	NoPublishBeforeWait
	// IndexBeforeEntry: the producer stores PI before it writes the entry.
	IndexBeforeEntry
	// IgnoreDonePhase: the command producer's IsDone tests DONE alone.
	IgnoreDonePhase
	// KeepDoneOnCommit: the commit stamps the phase bit alone and leaves
	// the previous lap's DONE and DONE_PHASE in the control word.
	KeepDoneOnCommit
	// NoIdleInterrupt: the moderating device raises the interrupt only on
	// its thresholds, not always before going idle.
	NoIdleInterrupt
	// PartialRecheck: a device consuming several rings re-checks only the
	// first after setting NEED_WAKEUP on all of them.
	PartialRecheck
)

var faultNames = []string{"NoRecheck", "FlagBeforeIndex", "NoReleaseBeforePark", "NoPublishBeforeWait",
	"IndexBeforeEntry", "IgnoreDonePhase", "KeepDoneOnCommit", "NoIdleInterrupt", "PartialRecheck"}

func (f Fault) String() string {
	if f == 0 {
		return "none"
	}
	s := ""
	for i, n := range faultNames {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	return s
}

const needWakeup = rings.FlagNeedWakeup
