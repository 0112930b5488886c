package rings

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// Fuzzers for the entry decoders, in the style of quic-go's internal/wire
// tests: the corpus is seeded from the encoders (valid and random field
// values), every input that decodes must re-encode to the same bytes and
// decode to the same fields, and every truncated prefix of a whole entry is
// rejected with an error. Without -fuzz they run the seed corpus as normal
// tests:
//
//	go test -run '^Fuzz' ./rings/
//	go test -fuzz FuzzCommandDecode ./rings/

// entryCodec adapts one entry type to the generic checks.
type entryCodec[T comparable] struct {
	size     int
	decode   func(*T, []byte) error
	encode   func(*T, []byte)
	reserved func(i int) bool // bytes Encode writes as zero whatever the fields
}

// seed adds n encodings of random field values, a zero entry, and short
// and long buffers.
func (c entryCodec[T]) seed(f *testing.F, n int, random func(*rand.Rand) T) {
	r := rand.New(rand.NewPCG(0x5eed, uint64(c.size)))
	for i := 0; i < n; i++ {
		v := random(r)
		b := make([]byte, c.size)
		le.PutUint32(b, r.Uint32()) // the control word is the ring's: anything
		c.encode(&v, b)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 1))
	f.Add(make([]byte, c.size-1))
	f.Add(make([]byte, c.size))
	f.Add(make([]byte, c.size+7))
}

func (c entryCodec[T]) check(t *testing.T, data []byte) {
	var v T
	err := c.decode(&v, data)
	if len(data) < c.size {
		var se *ShortError
		if !errors.As(err, &se) || se.Got != len(data) || se.Want != c.size || se.Error() == "" {
			t.Fatalf("Decode of %d bytes = %v, want a ShortError{Got: %d, Want: %d}", len(data), err, len(data), c.size)
		}
		return
	}
	if err != nil {
		t.Fatalf("Decode of %d bytes: %v", len(data), err)
	}
	// Every truncated prefix is rejected.
	for n := 0; n < c.size; n++ {
		var w T
		if err := c.decode(&w, data[:n]); err == nil {
			t.Fatalf("Decode accepted a %d-byte prefix of a %d-byte entry", n, c.size)
		}
	}
	checkReencode(t, c.size, 4, c.encode, c.decode, c.reserved, data, v)
}

// checkReencode encodes v, which data decoded to, into a fresh buffer with
// sentinel bytes around the fields: the same bytes as data (reserved ones
// zero), the first ctrl bytes (the ring's control word) untouched, nothing
// written past size; and Decode of that gives v back. The entry and block
// fuzzers share it.
func checkReencode[T comparable](t *testing.T, size, ctrl int, encode func(*T, []byte), decode func(*T, []byte) error,
	reserved func(i int) bool, data []byte, v T) {
	t.Helper()
	buf := make([]byte, size+8)
	for i := range buf {
		buf[i] = 0xA5
	}
	encode(&v, buf[:size:size])
	for i := range buf {
		var want byte
		switch {
		case i < ctrl || i >= size:
			want = 0xA5
		case reserved != nil && reserved(i):
			want = 0
		default:
			want = data[i]
		}
		if buf[i] != want {
			t.Fatalf("re-encoded byte %#x is %#x, want %#x\nin  % x\nout % x", i, buf[i], want, data[:size], buf)
		}
	}
	var back T
	if err := decode(&back, buf[:size]); err != nil || back != v {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", v, back, err)
	}
}

var opcodes = []Opcode{OpNop, OpStats, OpOffload, OpPostBuffers, OpSetThresholds, OpUpdate, OpClose,
	OpAbort, OpRelease, OpQueryConn, OpRegMR, OpDeregMR, OpCreateQP, OpModifyQP, OpDestroyQP}

var commandCodec = entryCodec[Command]{
	size:   CommandEntrySize,
	decode: func(c *Command, b []byte) error { return c.Decode(b) },
	encode: func(c *Command, b []byte) { c.Encode(b) },
}

func randomCommand(r *rand.Rand) Command {
	c := Command{
		Opcode: opcodes[r.IntN(len(opcodes))], Flags: uint16(r.Uint32()), Conn: r.Uint32(),
		Tag: r.Uint64(), Addr: Addr(r.Uint64()), Len: r.Uint32(),
		Arg0: r.Uint32(), Arg1: r.Uint32(), Arg2: r.Uint32(), Arg3: r.Uint64(),
	}
	switch r.IntN(4) {
	case 0:
		c.Conn = NoConn
		c.Addr = ArenaBase + Addr(r.IntN(1<<20))
	case 1: // completed: the device's write-back
		c.Status, c.Result = Status(r.IntN(9)), r.Uint64()
	case 2:
		c.Opcode = Opcode(r.Uint32()) // unknown opcodes decode too
	}
	return c
}

func FuzzCommandDecode(f *testing.F) {
	commandCodec.seed(f, 32, randomCommand)
	f.Fuzz(func(t *testing.T, data []byte) {
		commandCodec.check(t, data)
		if len(data) >= CommandEntrySize {
			e := CommandEntry(data)
			_, _ = e.Opcode().String(), e.Status().String()
		}
	})
}

var notificationCodec = entryCodec[Notification]{
	size:   NotificationEntrySize,
	decode: func(n *Notification, b []byte) error { return n.Decode(b) },
	encode: func(n *Notification, b []byte) { n.Encode(b) },
}

func randomNotification(r *rand.Rand) Notification {
	n := Notification{
		Flags: NotifyFlags(1) << r.IntN(12), Conn: r.Uint32(), Seq: r.Uint32(), Ack: r.Uint32(),
		AckCount: r.Uint32(), Len: r.Uint32(), Aux: r.Uint32(),
	}
	if r.IntN(2) == 0 {
		n.Flags = NotifyFlags(r.Uint32())
	}
	if r.IntN(3) == 0 {
		n.Conn = NoConn
	}
	return n
}

func FuzzNotificationDecode(f *testing.F) {
	notificationCodec.seed(f, 32, randomNotification)
	f.Fuzz(func(t *testing.T, data []byte) {
		notificationCodec.check(t, data)
		if len(data) >= NotificationEntrySize {
			_ = NotificationEntry(data).Flags().String()
		}
	})
}

var txCodec = entryCodec[Tx]{
	size:   TxDescSize,
	decode: func(x *Tx, b []byte) error { return x.Decode(b) },
	encode: func(x *Tx, b []byte) { x.Encode(b) },
}

func randomTx(r *rand.Rand) Tx {
	x := Tx{Conn: r.Uint32(), Addr: Addr(r.Uint64()), Len: r.Uint32(), Flags: TxFlags(r.IntN(4)), Tag: r.Uint64()}
	if r.IntN(2) == 0 {
		x.Conn, x.Flags = NoConn, 0
		x.Addr, x.Len = ArenaBase+Addr(r.IntN(1<<20)), uint32(60+r.IntN(1455))
	}
	return x
}

func FuzzTxDecode(f *testing.F) {
	txCodec.seed(f, 32, randomTx)
	f.Fuzz(func(t *testing.T, data []byte) { txCodec.check(t, data) })
}

var rxCodec = entryCodec[Rx]{
	size:     RxDescSize,
	decode:   func(x *Rx, b []byte) error { return x.Decode(b) },
	encode:   func(x *Rx, b []byte) { x.Encode(b) },
	reserved: func(i int) bool { return i >= RxOffRsvd && i < RxOffRsvd+4 },
}

func randomRx(r *rand.Rand) Rx {
	return Rx{BufID: r.Uint32(), Addr: ArenaBase + Addr(r.IntN(1<<20)), Len: uint32(r.IntN(1 << 16)), Tag: r.Uint64()}
}

func FuzzRxDecode(f *testing.F) {
	rxCodec.seed(f, 32, randomRx)
	f.Fuzz(func(t *testing.T, data []byte) { rxCodec.check(t, data) })
}

// TestEncodeDecodeRandom round-trips many random field values through every
// entry type (the fuzzers' property, on far more values than the seeds).
func TestEncodeDecodeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 2000; i++ {
		roundTrip(t, commandCodec, randomCommand(r))
		roundTrip(t, notificationCodec, randomNotification(r))
		roundTrip(t, txCodec, randomTx(r))
		roundTrip(t, rxCodec, randomRx(r))
	}
}

func roundTrip[T comparable](t *testing.T, c entryCodec[T], v T) {
	t.Helper()
	b := make([]byte, c.size)
	c.encode(&v, b)
	var back T
	if err := c.decode(&back, b); err != nil || back != v {
		t.Fatalf("%T: Decode(Encode(%+v)) = %+v, %v", v, v, back, err)
	}
	c.check(t, b)
}

// TestStringers: names for known values, a hex fallback for unknown ones.
func TestStringers(t *testing.T) {
	cases := []struct{ got, want string }{
		{OpNop.String(), "NOP"},
		{Opcode(0).String(), "OP_0000"},
		{Opcode(0xBEEF).String(), "OP_beef"},
		{StatusInternalError.String(), "INTERNAL_ERROR"},
		{Status(9).String(), "STATUS_0009"},
		{NotifyFlags(0).String(), "0"},
		{(NtfFin | NtfRst).String(), "FIN|RST"},
		{(NtfAckThreshold | 1<<15).String(), "ACK_THRESHOLD|0x00008000"},
		{NotifyFlags(1 << 14).String(), "0x00004000"},
		{StatRxFrames.String(), "rx_frames"},
		{NumStats.String(), "stat_34"},
		{StatID(-1).String(), "stat_-1"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// Stat block accessors use the documented offsets.
	blk := StatBlock(make([]byte, StatBlockSize))
	for id := StatID(0); id < NumStats; id++ {
		blk.Set(id, uint64(id)*1000+7)
	}
	for id := StatID(0); id < NumStats; id++ {
		if blk.Get(id) != uint64(id)*1000+7 || le.Uint64(blk[8*int(id):]) != uint64(id)*1000+7 {
			t.Fatalf("counter %v at the wrong place", id)
		}
	}
}
