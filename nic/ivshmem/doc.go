// Package ivshmem attaches the device to a QEMU guest through QEMU's
// ivshmem-doorbell PCI device (vendor 1af4, device 1110): this process is
// the ivshmem server, and also the peer that the guest's doorbell writes
// ring (docs/guest.md).
//
// QEMU's ivshmem-doorbell has two BARs that matter: BAR0, its own 256
// bytes of registers (interrupt mask and status, IVPosition, Doorbell),
// and BAR2, a shared-memory object that this server creates and hands to
// QEMU with the protocol of QEMU's docs/specs/ivshmem-spec.rst. The
// server speaks that protocol (the "client-server protocol": one 8-byte
// little-endian number a message, some with a file descriptor) over a
// unix stream socket: the protocol version, the guest's peer ID, the
// shared memory, the eventfds that interrupt the device (peer 0, one per
// vector), and the guest's own eventfds, which the device writes to raise
// the guest's MSI-X vectors.
//
// What the bytes of BAR2 mean is not this package's business: a Handler
// gets the mapped memory when a guest attaches, a call for every doorbell
// the guest rings (which vector, how many times), and a way to raise the
// guest's vectors; it is told when the guest goes (QEMU closing the socket,
// or dying). Each attach gets fresh, zeroed memory and fresh eventfds, so
// nothing of one guest reaches the next.
//
// Client is the other side of the protocol, as QEMU speaks it: the tests
// use it as a fake guest, and it is how a program in the host can stand
// in for one.
package ivshmem
