package rdmatool

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// rping's wire messages (librdmacm/examples/rping.c).
//
// Every Send is 16 bytes, struct rping_rdma_info, big-endian:
//
//	0x00 u64 buf   the address (tagged offset) of a buffer
//	0x08 u32 rkey  its STag
//	0x0C u32 size  its length
//
// Per ping k (0, 1, …), with size S (the client's -S):
//  1. client Send {start buffer}: S bytes "rdma-ping-k: " then the
//     letters 'A'.. 'z' cycling from 'A'+k mod 58, NUL at S-1
//  2. server RDMA Read of size bytes from it
//  3. server Send (16 bytes, content unused: "go ahead")
//  4. client Send {sink buffer}
//  5. server RDMA Write of strlen+1 bytes of what it read to the sink
//  6. server Send ("go ahead")
//
// and the client checks the sink equals its start buffer.
const (
	PingPort    = 7174
	PingMinSize = 26 // rping's RPING_MIN_BUFSIZE: "rdma-ping-%d: " of INT_MAX
	PingMaxSize = 1 << 20
	// clientCloseWait bounds a server's wait for the client to close.
	clientCloseWait = 10 * time.Second
	infoLen         = 16

	infoOffBuf  = 0x00
	infoOffRKey = 0x08
	infoOffSize = 0x0C
)

// PingInfo is the 16-byte buffer advertisement of rping's Sends.
type PingInfo struct {
	Buf  uint64
	RKey uint32
	Size uint32
}

// Encode writes the 16 bytes into b.
func (p *PingInfo) Encode(b []byte) int {
	_ = b[infoLen-1]
	binary.BigEndian.PutUint64(b[infoOffBuf:], p.Buf)
	binary.BigEndian.PutUint32(b[infoOffRKey:], p.RKey)
	binary.BigEndian.PutUint32(b[infoOffSize:], p.Size)
	return infoLen
}

// Decode reads the 16 bytes from b.
func (p *PingInfo) Decode(b []byte) (int, error) {
	if len(b) < infoLen {
		return 0, fmt.Errorf("rdmatool: rping message of %d bytes, want %d", len(b), infoLen)
	}
	*p = PingInfo{Buf: binary.BigEndian.Uint64(b[infoOffBuf:]), RKey: binary.BigEndian.Uint32(b[infoOffRKey:]),
		Size: binary.BigEndian.Uint32(b[infoOffSize:])}
	return infoLen, nil
}

// PingData fills b with the payload of rping's ping k (its whole buffer).
func PingData(b []byte, k int) {
	n := copy(b, "rdma-ping-"+strconv.Itoa(k)+": ")
	c := byte(65 + k%58)
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	if len(b) > 0 {
		b[len(b)-1] = 0
	}
}

// PingConfig is a ping session's parameters.
type PingConfig struct {
	Count int // pings (at least 1)
	Size  int // bytes per ping (PingMinSize..PingMaxSize)
	Port  uint16
	Options
	// Out gets one line per verified ping (may be nil).
	Out io.Writer
}

func (c *PingConfig) check() error {
	switch {
	case c.Count < 1:
		return fmt.Errorf("rdmatool: ping count %d, want at least 1", c.Count)
	case c.Size < PingMinSize || c.Size > PingMaxSize:
		return fmt.Errorf("rdmatool: ping size %d, want %d to %d", c.Size, PingMinSize, PingMaxSize)
	}
	if c.Port == 0 {
		c.Port = PingPort
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// Buffer layout of a ping session: two receive slots, the Send message,
// the start (source) buffer and the RDMA (sink) buffer.
const (
	offRecv  = 0
	offSend  = 2 * infoLen
	offStart = 64
)

func offRDMA(size int) int { return offStart + (size+63)&^63 }

// newPingSession checks cfg and makes a ping session's buffer and the QP set-up that
// posts its two receives (both roles have one Send of the peer's in
// flight, and repost at once).
func newPingSession(v *verbs.Provider, cfg *PingConfig) (*session, func(*verbs.QP) error, error) {
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	s, err := newSession(v, offRDMA(cfg.Size)+cfg.Size)
	if err != nil {
		return nil, nil, err
	}
	return s, func(qp *verbs.QP) error {
		if err := s.postRecv(qp, 0, offRecv, infoLen); err != nil {
			return err
		}
		return s.postRecv(qp, 1, offRecv+infoLen, infoLen)
	}, nil
}

// PingClient is rping -c: it connects to dst and sends cfg.Count pings,
// each verified when the server's RDMA Write brings it back. It returns
// how many were verified; the error says why it stopped short.
func PingClient(ctx context.Context, v *verbs.Provider, dst netip.AddrPort, cfg PingConfig) (int, error) {
	s, setup, err := newPingSession(v, &cfg)
	if err != nil {
		return 0, err
	}
	defer s.close()
	// rping's conn_param: one read each way.
	if s.qp, err = v.DialRDMA(ctx, dst, s.attr(cfg.Options, 1, 1, setup)); err != nil {
		return 0, err
	}
	if err := settle(ctx); err != nil {
		return 0, err
	}
	b := s.buf.Bytes()
	start, sink := b[offStart:offStart+cfg.Size], b[offRDMA(cfg.Size):offRDMA(cfg.Size)+cfg.Size]
	advertise := func(off int) error {
		p := PingInfo{Buf: s.mr.TO(off), RKey: s.mr.RKey, Size: uint32(cfg.Size)}
		p.Encode(b[offSend:])
		if err := s.send(ctx, offSend, infoLen); err != nil {
			return err
		}
		c, err := s.await(ctx, rings.WCRecv)
		if err != nil {
			return err
		}
		if c.ByteLen != infoLen {
			return fmt.Errorf("rdmatool: the server's Send has %d bytes, want %d", c.ByteLen, infoLen)
		}
		return s.postRecv(s.qp, c.WRID, offRecv+int(c.WRID)*infoLen, infoLen)
	}
	for k := 0; k < cfg.Count; k++ {
		PingData(start, k)
		clear(sink)
		if err := advertise(offStart); err != nil {
			return k, fmt.Errorf("ping %d: %w", k, err)
		}
		if err := advertise(offRDMA(cfg.Size)); err != nil {
			return k, fmt.Errorf("ping %d: %w", k, err)
		}
		if !bytes.Equal(start, sink) {
			return k, fmt.Errorf("ping %d: data mismatch: sent %q, got back %q", k, cstring(start), cstring(sink))
		}
		fmt.Fprintf(cfg.Out, "ping data: %s\n", cstring(sink))
	}
	return cfg.Count, nil
}

// PingServer is rping -s: it listens on cfg.Port, serves the first client
// that connects, and returns after cfg.Count pings it read, verified
// against rping's pattern and wrote back, or when the client leaves.
func PingServer(ctx context.Context, v *verbs.Provider, cfg PingConfig, ready func()) (int, error) {
	s, setup, err := newPingSession(v, &cfg)
	if err != nil {
		return 0, err
	}
	defer s.close()
	l, err := v.ListenRDMA(cfg.Port, s.attr(cfg.Options, 1, 1, setup))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	if ready != nil {
		ready()
	}
	if s.qp, err = l.Accept(ctx); err != nil {
		return 0, err
	}
	b := s.buf.Bytes()
	sink := b[offRDMA(cfg.Size) : offRDMA(cfg.Size)+cfg.Size]
	want := make([]byte, cfg.Size)
	recvInfo := func() (PingInfo, error) {
		var p PingInfo
		c, err := s.await(ctx, rings.WCRecv)
		if err != nil {
			return p, err
		}
		if c.ByteLen != infoLen {
			return p, fmt.Errorf("rdmatool: the client's Send has %d bytes, want %d", c.ByteLen, infoLen)
		}
		off := offRecv + int(c.WRID)*infoLen
		_, _ = p.Decode(b[off : off+infoLen])
		if p.Size == 0 || p.Size > uint32(cfg.Size) {
			return p, fmt.Errorf("rdmatool: the client advertises %d bytes; this server takes 1 to %d (--size)", p.Size, cfg.Size)
		}
		return p, s.postRecv(s.qp, c.WRID, off, infoLen)
	}
	goAhead := func() error {
		clear(b[offSend : offSend+infoLen])
		return s.send(ctx, offSend, infoLen)
	}
	for k := 0; k < cfg.Count; k++ {
		src, err := recvInfo()
		if err != nil {
			return k, fmt.Errorf("ping %d: %w", k, err)
		}
		n := int(src.Size)
		clear(sink)
		if err := s.post(rings.WRRDMARead, 1, offRDMA(cfg.Size), n, src.Buf, src.RKey); err != nil {
			return k, err
		}
		if _, err := s.await(ctx, rings.WCRDMARead); err != nil {
			return k, fmt.Errorf("ping %d: RDMA Read: %w", k, err)
		}
		PingData(want[:n], k)
		if !bytes.Equal(sink[:n], want[:n]) {
			return k, fmt.Errorf("ping %d: the client's data is not rping's: %q", k, cstring(sink[:n]))
		}
		if err := goAhead(); err != nil {
			return k, fmt.Errorf("ping %d: %w", k, err)
		}
		dst, err := recvInfo()
		if err != nil {
			return k, fmt.Errorf("ping %d: %w", k, err)
		}
		m := min(len(cstring(sink[:n]))+1, n, int(dst.Size))
		if err := s.post(rings.WRRDMAWrite, 2, offRDMA(cfg.Size), m, dst.Buf, dst.RKey); err != nil {
			return k, err
		}
		if _, err := s.await(ctx, rings.WCRDMAWrite); err != nil {
			return k, fmt.Errorf("ping %d: RDMA Write: %w", k, err)
		}
		if err := goAhead(); err != nil {
			return k, fmt.Errorf("ping %d: %w", k, err)
		}
		fmt.Fprintf(cfg.Out, "server ping data: %s\n", cstring(sink[:n]))
	}
	// rping's client disconnects after its last ping, and rping's server
	// waits for that: a server that closes first can leave the client
	// hanging in its CQ thread (siw's rping does). Wait for the client's
	// close (its receives flush) a while at most, then close.
	wctx, cancel := context.WithTimeout(ctx, clientCloseWait)
	_, _ = s.await(wctx, rings.WCRecv)
	cancel()
	return cfg.Count, nil
}

// cstring is b up to its first NUL.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
