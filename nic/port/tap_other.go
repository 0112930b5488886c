//go:build !linux

package port

import (
	"errors"
	"fmt"
	"net"
)

// TAPMaxFrameSize is the longest frame a TAP port reads or writes.
const TAPMaxFrameSize = 65535 + EthHeaderLen + 4

// TAPPort is only available on Linux; elsewhere OpenTAP fails.
type TAPPort struct{ name string }

// TAPError is the error OpenTAP returns.
type TAPError struct {
	Name, Op string
	Err      error
	Reason   string
}

func (e *TAPError) Error() string { return fmt.Sprintf("tap %q: %s", e.Name, e.Reason) }
func (e *TAPError) Unwrap() error { return e.Err }

var errNoTAP = errors.New("TAP devices need Linux")

// OpenTAP fails: TAP devices need Linux.
func OpenTAP(name string) (*TAPPort, error) {
	return nil, &TAPError{Name: name, Op: "open", Err: errNoTAP, Reason: "TAP devices need Linux (/dev/net/tun)"}
}

func (t *TAPPort) Name() string                            { return t.name }
func (t *TAPPort) String() string                          { return "tap:" + t.name }
func (t *TAPPort) WriteFrame([]byte) error                 { return ErrClosed }
func (t *TAPPort) ReadFrame([]byte) (int, error)           { return 0, ErrClosed }
func (t *TAPPort) Close() error                            { return nil }
func (t *TAPPort) Stats() Stats                            { return Stats{} }
func (t *TAPPort) SetUp(bool) error                        { return errNoTAP }
func (t *TAPPort) SetMTU(int) error                        { return errNoTAP }
func (t *TAPPort) MTU() (int, error)                       { return 0, errNoTAP }
func (t *TAPPort) HardwareAddr() (net.HardwareAddr, error) { return nil, errNoTAP }

var _ Port = (*TAPPort)(nil)
