package direct

import (
	"bytes"
	"io"
	"sync"
	"testing"

	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/nic/port"
)

// mpaSpy records the flags byte of the MPA request or reply frames a port
// sends (the frames of the switch's RDMA connections).
type mpaSpy struct {
	port.Port
	mu    sync.Mutex
	flags map[string]byte // key ("MPA ID Req Frame", "MPA ID Rep Frame") → flags
}

func (s *mpaSpy) WriteFrame(f []byte) error {
	for _, key := range []string{iwarp.MPAKeyRequest, iwarp.MPAKeyReply} {
		if i := bytes.Index(f, []byte(key)); i >= 0 && i+iwarp.MPAOffFlags < len(f) {
			s.mu.Lock()
			s.flags[key] = f[i+iwarp.MPAOffFlags]
			s.mu.Unlock()
		}
	}
	return s.Port.WriteFrame(f)
}

func (s *mpaSpy) crc(key string) (on, seen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.flags[key]
	return f&iwarp.MPAFlagCRC != 0, ok
}

// TestCRCNegotiation: sockets direct asks for no MPA CRC unless
// Config.CRC says so, and either end asking turns it on (the reply says
// what is in force); the stream works either way.
func TestCRCNegotiation(t *testing.T) {
	for _, tc := range []struct{ dial, listen, want bool }{
		{false, false, false}, {true, false, true}, {false, true, true}, {true, true, true},
	} {
		sa := &mpaSpy{flags: map[string]byte{}}
		sb := &mpaSpy{flags: map[string]byte{}}
		r := hostrig.New(t, hostrig.Config{
			WrapA: func(p *port.WirePort) (port.Port, error) { sa.Port = p; return sa, nil },
			WrapB: func(p *port.WirePort) (port.Port, error) { sb.Port = p; return sb, nil }})
		ca, cb := pair(t, r.A, r.B, Config{CRC: tc.dial}, Config{CRC: tc.listen})
		if PathOf(ca).Path != PathRDMA {
			t.Fatalf("%+v: %v", tc, PathOf(ca))
		}
		msg := bytes.Repeat([]byte("crc?"), 40<<10) // by RDMA and inline
		go func() { ca.Write(msg); ca.Close() }()
		got, err := io.ReadAll(cb)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%+v: read %d bytes, %v", tc, len(got), err)
		}
		cb.Close()
		req, ok1 := sa.crc(iwarp.MPAKeyRequest)
		rep, ok2 := sb.crc(iwarp.MPAKeyReply)
		if !ok1 || !ok2 || req != tc.dial || rep != tc.want {
			t.Errorf("dial CRC %v, listen CRC %v: request C %v (seen %v), reply C %v (seen %v); want request %v, reply %v",
				tc.dial, tc.listen, req, ok1, rep, ok2, tc.dial, tc.want)
		}
		Shutdown(r.A)
		Shutdown(r.B)
	}
}
