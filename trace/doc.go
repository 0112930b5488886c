// Package trace records, replays, compares and prints ring traces: everything
// that crossed an emulated NIC's boundary during a run, in the order the
// device met it. A trace holds every ring entry the host published (as the
// device could first see it), every entry, index and status the device wrote
// back, every DMA read and write of host memory outside the rings, every frame
// at the port and every interrupt, grouped into the offload unit's steps, each
// with the device clock it read. The file format and the argument for why a
// replay is exact are in docs/trace.md.
//
// The pieces, by file:
//
//   - format.go: the file format. Writer appends records to a trace shared by
//     several devices, Reader and ReadAll read one back; each record carries
//     a CRC-32C and the End record counts the records before it, so a flipped
//     byte or a cut file is found where it is.
//   - record.go: Recorder, one device's nic.Tracer. Writer.NewDevice returns
//     it; set as nic.Config.Tracer (with a fixed STagSeed), it wraps the
//     device's host memory, rings, port and vectors, and the device then runs
//     its unit in steps.
//   - replay.go: Replay and ReplayRecords build a fresh, manually stepped
//     device from each recorded configuration, serve every recorded input at
//     the moment the device asks for it and compare every output; the first
//     mismatch is a Divergence with the outputs that matched before it.
//   - diff.go: Diff compares two traces record by record.
//   - show.go: Printer and Show decode a trace for people: commands,
//     notifications, work requests, completions and frames by name.
//
// Why a replay can be exact: a traced unit reads its clock once per step,
// takes the host's ring indices from a shadow refreshed only as a step begins,
// and keeps NEED_WAKEUP set on every ring it consumes, so no step depends on
// how the host's goroutines were scheduled. A trace from any run, lossy wire
// and real hosts included, therefore replays the same way every time; the
// golden traces in tests/testdata/traces are replayed by every test run.
//
// This package is on the device side of the boundary: it imports nic,
// nic/port and rings, never the host (tcpstack). Deterministic recordings,
// where the hosts too run on the virtual clock, are the lockstep harness's
// job; this package only records what the devices saw.
package trace
