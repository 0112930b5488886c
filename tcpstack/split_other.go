//go:build !linux

package tcpstack

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

// ErrDeviceGone is the error of a host whose device process has gone.
var ErrDeviceGone = errors.New("the NIC's device process has gone")

// RunSplitChild does nothing: split mode needs Linux.
func RunSplitChild() {}

type splitDevice struct {
	mu     sync.Mutex
	onDead func(error)
}

func splitFromEnv() bool { return false }

func dialSplit(SplitConfig, int, bool) (*splitDevice, *rings.Arena, error) {
	return nil, nil, errors.New("split mode needs Linux")
}

func (d *splitDevice) configure(nic.Config, port.Port, *os.File, *ShmLinkEnd) error {
	return errors.New("split mode needs Linux")
}
func (d *splitDevice) Err() error               { return nil }
func (d *splitDevice) Stop() error              { return nil }
func (d *splitDevice) MAC() [6]byte             { return [6]byte{} }
func (d *splitDevice) MTU() int                 { return 0 }
func (d *splitDevice) Doorbell() rings.Doorbell { return nil }
func (d *splitDevice) Start(rings.RingConfig, rings.Vectors) error {
	return errors.New("split mode needs Linux")
}
