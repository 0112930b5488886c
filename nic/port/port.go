// Package port is the emulated NIC's attachment to a wire: its MAC/PHY.
//
// Everything above this package (the offload unit, the legacy rings, the host stack) deals in
// Ethernet frames: destination MAC first, no preamble, no FCS. A Port moves such frames between
// the device and something that plays the part of the cable and the far end:
//
//   - [NewWire] makes an in-memory cable with a port at each end. Each direction is a bounded
//     receive FIFO at the far end (drop-tail when full, as a switch or a NIC's RX FIFO does)
//     and can be given seeded impairments: loss, duplication, reordering, corruption, delay,
//     jitter and a line rate. With no impairments a frame is copied once into a pooled buffer,
//     handed straight to the peer's FIFO and copied once out by the reader: no goroutine, no
//     timer, no allocation per frame.
//   - [OpenTAP] attaches to a Linux TAP device, so the far end is the kernel's network stack.
//   - [NewHub] shares one Port among several NICs, as a repeater does a segment: several
//     emulated hosts behind one TAP (on different VLANs of a trunk, each NIC filtering).
//   - [NewRecorder] wraps any Port and writes every frame that crosses it to a pcap file, so a
//     run can be opened in Wireshark or diffed against a capture from RTL or firmware.
//
// Ports copy: WriteFrame does not keep the caller's slice and ReadFrame copies into the caller's
// buffer. That is the contract of a MAC's DMA engine too (the frame is in the MAC's FIFO once
// the descriptor completes), and it lets the layers above reuse their buffers at once.
//
// Counters live in [Stats] and follow the names an ethtool -S user expects: what was sent and
// received, and every drop by its reason. Nothing is dropped silently.
package port

import (
	"errors"
	"fmt"
	"strings"
)

// Ethernet sizes the package relies on.
const (
	// EthHeaderLen is the length of an untagged Ethernet header: dst MAC, src MAC, EtherType.
	// A frame shorter than this cannot be delivered anywhere and is refused as a runt.
	EthHeaderLen = 14

	// MaxFrameSize is the largest frame a port carries by default: a 65535-byte IP datagram
	// (the largest MTU gVisor netstack and the Linux tun driver accept) plus the Ethernet header.
	MaxFrameSize = 65535 + EthHeaderLen
)

// Port is one Ethernet attachment of the emulated NIC.
type Port interface {
	// WriteFrame transmits one Ethernet frame (dst MAC first, no FCS). The port does not
	// retain frame after returning (copy semantics). Safe for one writer goroutine at a time.
	WriteFrame(frame []byte) error
	// ReadFrame blocks until a frame arrives and copies it into buf, returning its length.
	// A frame longer than buf is dropped, counted, and ErrFrameTooBig returned (caller keeps reading).
	// After Close it returns ErrClosed (also unblocks a blocked reader).
	ReadFrame(buf []byte) (int, error)
	Close() error
	Stats() Stats // snapshot: frames/bytes in/out, drops by reason
}

var (
	// ErrClosed is returned by WriteFrame and ReadFrame once the port is closed.
	ErrClosed = errors.New("port closed")
	// ErrFrameTooBig is returned by ReadFrame when the frame does not fit the caller's buffer
	// (the frame is dropped and counted in RxDropTooBig), and by WriteFrame when the frame is
	// longer than the port's maximum frame size (counted in TxDropTooBig).
	ErrFrameTooBig = errors.New("frame too big")
	// ErrRuntFrame is returned by WriteFrame for a frame shorter than the Ethernet header.
	ErrRuntFrame = errors.New("runt frame: shorter than the 14-byte Ethernet header")
)

// Stats is a snapshot of a port's counters. Counters only grow; take two snapshots and subtract
// to measure an interval. Tx counters describe frames this port transmitted (WriteFrame), Rx
// counters frames it received (ReadFrame). Impairments are counted on the transmitting port,
// because in this model the wire belongs to the direction that leaves the port.
type Stats struct {
	TxFrames uint64 // frames accepted by WriteFrame (before any wire impairment)
	TxBytes  uint64
	RxFrames uint64 // frames returned by ReadFrame
	RxBytes  uint64

	TxDropTooBig    uint64 // WriteFrame: longer than the port's maximum frame size
	TxDropRunt      uint64 // WriteFrame: shorter than the Ethernet header
	TxDropClosed    uint64 // WriteFrame after Close, or held in the wire when the port closed
	TxDropLinkDown  uint64 // accepted, but the far end is closed (cable unplugged)
	TxDropQueueFull uint64 // the wire's delay line / rate-limiter backlog was full (drop-tail)
	TxDropLoss      uint64 // lost on the wire by the loss impairment
	TxErrors        uint64 // the underlying device refused the frame (TAP: write error)
	TxGSOFrames     uint64 // TAP with offloads: TCP super-frames written (WriteFrameTSO), each counted once in TxFrames

	RxDropTooBig    uint64 // ReadFrame: the caller's buffer was shorter than the frame
	RxGSOFrames     uint64 // TAP with offloads: TCP super-frames the kernel handed over (split into RxFrames)
	RxDropBadGSO    uint64 // TAP with offloads: a super-frame or virtio-net header the port could not take apart
	RxDropQueueFull uint64 // arrived while the receive FIFO was full (drop-tail, like rx_missed)
	RxDropClosed    uint64 // still queued in the receive FIFO when the port closed
	RxDropLoss      uint64 // TAP: reads the receive loss impairment dropped (TAPOptions.RxLossPercent)
	RxBusyPollHits  uint64 // TAP: reads a busy poll served, without the netpoller (TAPOptions.BusyPoll)

	Duplicated uint64 // extra copies the duplication impairment put on the wire
	Reordered  uint64 // frames the reordering impairment held back
	Corrupted  uint64 // frames that had one byte flipped by the corruption impairment
}

// TxDropped is the total of frames written to this port that never reached the far end's FIFO.
func (s Stats) TxDropped() uint64 {
	return s.TxDropTooBig + s.TxDropRunt + s.TxDropClosed + s.TxDropLinkDown +
		s.TxDropQueueFull + s.TxDropLoss + s.TxErrors
}

// RxDropped is the total of frames that arrived at this port and were not delivered by ReadFrame.
func (s Stats) RxDropped() uint64 {
	return s.RxDropTooBig + s.RxDropQueueFull + s.RxDropClosed + s.RxDropBadGSO + s.RxDropLoss
}

// String prints the non-zero counters on one line, for logs and test failures.
func (s Stats) String() string {
	var b strings.Builder
	add := func(name string, v uint64) {
		if v == 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", name, v)
	}
	add("tx_frames", s.TxFrames)
	add("tx_bytes", s.TxBytes)
	add("rx_frames", s.RxFrames)
	add("rx_bytes", s.RxBytes)
	add("tx_drop_too_big", s.TxDropTooBig)
	add("tx_drop_runt", s.TxDropRunt)
	add("tx_drop_closed", s.TxDropClosed)
	add("tx_drop_link_down", s.TxDropLinkDown)
	add("tx_drop_queue_full", s.TxDropQueueFull)
	add("tx_drop_loss", s.TxDropLoss)
	add("tx_errors", s.TxErrors)
	add("rx_drop_too_big", s.RxDropTooBig)
	add("rx_drop_queue_full", s.RxDropQueueFull)
	add("rx_drop_closed", s.RxDropClosed)
	add("rx_drop_loss", s.RxDropLoss)
	add("duplicated", s.Duplicated)
	add("reordered", s.Reordered)
	add("corrupted", s.Corrupted)
	if b.Len() == 0 {
		return "idle"
	}
	return b.String()
}
