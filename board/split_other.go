//go:build !linux

package board

import (
	"errors"
	"os"
	"sync"
	"time"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// SplitConfig puts a host's NIC in another process; split mode needs
// Linux (memfd, eventfd, SOCK_SEQPACKET).
type SplitConfig struct {
	Socket       string
	Poll         bool
	PollInterval time.Duration
	Link         *os.File
	ShmLink      *ShmLinkEnd
}

// ShmLinkEnd is one side of a shared-memory link (Linux only).
type ShmLinkEnd struct{}

// NewShmLink fails: shared-memory links need Linux.
func NewShmLink(int) (a, b *ShmLinkEnd, err error) {
	return nil, nil, errors.New("split mode needs Linux")
}

// SplitEnv is the environment variable that puts every host in split mode.
const SplitEnv = "EMUNIC_SPLIT"

// RunSplitChild does nothing: split mode needs Linux.
func RunSplitChild() {}

type splitDevice struct {
	mu     sync.Mutex
	onDead func(error)
}

func splitFromEnv() bool { return false }

func (d *splitDevice) Err() error               { return nil }
func (d *splitDevice) Stop() error              { return nil }
func (d *splitDevice) MAC() [6]byte             { return [6]byte{} }
func (d *splitDevice) MTU() int                 { return 0 }
func (d *splitDevice) Doorbell() rings.Doorbell { return nil }
func (d *splitDevice) Start(rings.RingConfig, rings.Vectors) error {
	return errors.New("split mode needs Linux")
}

func (d *splitDevice) OnGone(func(error)) {}

func newSplit(SplitConfig, nic.Config, int, port.Port) (*splitDevice, *rings.Arena, error) {
	return nil, nil, errors.New("split mode needs Linux")
}

// RunTests runs the tests (split mode needs Linux).
func RunTests(m interface{ Run() int }) { os.Exit(m.Run()) }
