// Package board assembles an emulated machine: a NIC (package nic) on a
// port, its host memory, and the host software that drives it (package
// tcpstack), as a board vendor puts a NIC and a host together. It is the
// one place both sides meet: tcpstack and everything above it see the
// device only through the ABI (rings, registers, host memory; the Device
// interface in rings types), and the device never sees the host's Go
// types. The command, the tests and the lockstep harness (board/lockstep)
// build their hosts here.
//
// A board puts the device in this process, stepped by a lockstep harness
// when one is given, or in a process of its own (split mode,
// docs/split.md): the host's view is the same either way. A program that
// makes split hosts calls RunSplitChild first thing in main (or in
// TestMain), so that the same binary can serve as their device process.
package board
