package rings

import "strconv"

// The stat block is the device's counter page: an array of little-endian u64
// counters at fixed offsets (8 × index), DMA-written to host memory by the
// STATS command and readable as a register block. Every drop or rejection
// the device makes has a counter here, so a host can always tell what was
// lost and why.
type StatID int

// Counters, in stat block order. Append only: the index is the ABI.
const (
	StatRxFrames               StatID = iota // frames received from the port
	StatRxBytes                              // bytes received from the port
	StatTxFrames                             // frames sent to the port
	StatTxBytes                              // bytes sent to the port
	StatRxDropShort                          // frame shorter than its headers claim
	StatRxDropBadChecksum                    // IPv4 header or TCP checksum wrong
	StatRxDropEtherType                      // EtherType neither IPv4 nor ARP
	StatRxDropOversize                       // frame longer than MTU + link header
	StatRxDropNoBuffer                       // no legacy receive buffer posted
	StatRxDropNotForUs                       // destination MAC neither ours nor broadcast/multicast
	StatRxDropFIFO                           // receive FIFO overflow (unit too slow)
	StatTxDropBadDesc                        // transmit descriptor invalid (length, connection)
	StatTxDropPortError                      // port refused the frame
	StatCmdCompleted                         // commands completed (any status)
	StatCmdErrors                            // commands completed with a non-OK status
	StatCmdBadOpcode                         // commands with an unknown opcode
	StatDMAErrors                            // DMA accesses outside host memory
	StatRingPhaseErrors                      // ring entries with a wrong phase tag or index
	StatNotifyPosted                         // notifications written
	StatNotifyDropRingFull                   // notifications lost: notification ring full
	StatInterrupts                           // interrupts raised
	StatInterruptsCoalesced                  // notifications covered by an already pending interrupt
	StatDoorbells                            // doorbell kicks received while parked
	StatParks                                // times the offload unit parked
	StatTimerRuns                            // timer wheel passes
	StatRxDropVLAN                           // 802.1Q: a tagged frame of another VLAN, or an untagged frame at a device on a VLAN
	StatRxDropBadVLAN                        // 802.1Q: VLAN ID 0 or 4095, a truncated tag, or a double-tagged (QinQ) frame
	StatRxDropIPv6ExtChain                   // IPv6: extension-header chain malformed, too long or looping
	StatRxDropIPv6RoutingType0               // IPv6: routing header type 0 (RFC 5095)
	StatRxDropIPv6Fragment                   // IPv6: atomic fragment, or one no valid datagram holds (RFC 8021, RFC 8200 §4.5)
	StatRxDropIPv6Jumbogram                  // IPv6: hop-by-hop jumbo payload option (RFC 2675)
	StatTxCsum                               // legacy frames whose IPv4 header and TCP/UDP checksums the device filled in (TxCsum)
	StatTxDropCsum                           // legacy frames with TxCsum whose checksums the device cannot place (not IPv4/IPv6 TCP/UDP, a fragment, truncated, lengths that disagree)
	StatRDMABellErrors                       // RDMA doorbell register writes (RegQPDoorbell, RegCQArm) refused: no such QP or CQ, or FeatQPDoorbell withheld
	NumStats
)

// StatBlockSize is the size of the stat block in bytes.
const StatBlockSize = int(NumStats) * 8

var statNames = [NumStats]string{
	"rx_frames", "rx_bytes", "tx_frames", "tx_bytes",
	"rx_drop_short", "rx_drop_bad_checksum", "rx_drop_ethertype", "rx_drop_oversize",
	"rx_drop_no_buffer", "rx_drop_not_for_us", "rx_drop_fifo",
	"tx_drop_bad_desc", "tx_drop_port_error",
	"cmd_completed", "cmd_errors", "cmd_bad_opcode", "dma_errors", "ring_phase_errors",
	"notify_posted", "notify_drop_ring_full", "interrupts", "interrupts_coalesced",
	"doorbells", "parks", "timer_runs",
	"rx_drop_vlan", "rx_drop_bad_vlan",
	"rx_drop_ipv6_ext_chain", "rx_drop_ipv6_routing_type0", "rx_drop_ipv6_fragment", "rx_drop_ipv6_jumbogram",
	"tx_csum", "tx_drop_csum", "rdma_bell_errors",
}

func (s StatID) String() string {
	if s >= 0 && s < NumStats {
		return statNames[s]
	}
	return "stat_" + strconv.Itoa(int(s))
}

// Offset is the counter's byte offset in the stat block.
func (s StatID) Offset() int { return int(s) * 8 }

// StatBlock is an accessor over a stat block.
type StatBlock []byte

// Get returns counter id.
func (b StatBlock) Get(id StatID) uint64 { return le.Uint64(b[id.Offset():]) }

// Set stores counter id.
func (b StatBlock) Set(id StatID, v uint64) { le.PutUint64(b[id.Offset():], v) }
