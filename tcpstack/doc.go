// Package tcpstack is the host side: gVisor's netstack as the host TCP
// stack, running on the emulated NIC through a driver whose frames cross the
// device's rings in host memory, plus a small API that returns net.Listener
// and net.Conn, and the delegation of established connections to the NIC's
// offload unit.
//
// The host sees the device only through the ABI, as a driver written in C
// against rings/c/emunic_abi.h would: rings, registers and host memory
// (the Device interface, in rings types), and the counters the device
// publishes in host memory, by counter ID. This package and everything
// built on it import no device package (nic, nic/port, nic/split,
// delegation; nic/hdr is a shared leaf); package board assembles a device
// and a Host, and internal/layering's test holds both sides to it.
//
// Files:
//
//   - stack.go: the netstack instance (Stack) and the host (Host: host
//     memory, the driver of its NIC and a netstack), built on a Device.
//   - driver.go: the NIC driver, netstack's link endpoint: the legacy
//     transmit and receive rings, the interrupt vectors, the legacy
//     receive filter.
//   - cmdpath.go: the command path: command batches, their write-backs,
//     timeouts and late answers, quarantine.
//   - txspace.go: the transmit ring's free space for delegated
//     connections: waiting for slots, the backlog of descriptors.
//   - counters.go: the driver's counters (DriverStats, notification
//     counts).
//   - devcounters.go: the device's counters, read from the counter area
//     by ID into the host's types (DeviceCounters).
//   - flowtrack.go: the flow tracker, which follows the TCP state of the
//     connections that may be delegated.
//   - ackrepair.go: the ACK repair of segments netstack would ignore.
//   - offload.go: the offloader: OffloadConfig, connection indices and
//     their quarantine, the commands of a delegated connection's life
//     (receive buffers, credit, RELEASE), OffloadUsage.
//   - delegate.go: the delegation steps (freeze, drain, install: OFFLOAD
//     and its outcomes).
//   - tracked.go: TrackedConn, DialTracked, Delegate and DialOffload.
//   - listener.go: OffloadListener.
//   - dconn.go: DelegatedConn, a net.Conn run by the offload unit.
//   - ntfview.go: the host's view of a delegated connection that every
//     notification is checked against, and ConnInfo (DelegatedConn.Info).
//   - lowat.go: the receive and send low-water marks, armed as the
//     device's sequence and ACK thresholds (SET_THRESHOLDS).
//   - regread.go: registered-buffer reads (ReadRegistered): the device
//     places payload in the reader's own host memory.
//   - txstall.go: transmit NO_RESOURCES as back-pressure (resume, resend).
//   - fragments.go: IPv4 reassembly of TCP fragments, before netstack.
//   - rdmahost.go: the host's RDMA provider seam (RDMAHooks, RDMAHost,
//     Host.AttachRDMA): all that tcpstack/verbs uses of delegation.
//
// RDMA verbs (protection domains, memory regions, CQs, QPs, connection
// management) are in tcpstack/verbs, which imports this package; this
// package never imports it.
package tcpstack
