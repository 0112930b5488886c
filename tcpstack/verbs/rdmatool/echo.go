package rdmatool

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// rdma_server / rdma_client (librdmacm/examples): the client posts a
// 16-byte receive, connects (asking IRD = ORD = its device's most), and
// sends 16 bytes (inline); the server, its 16-byte receive posted before it
// accepts, answers with one 16-byte Send; then both disconnect. Neither
// looks at the bytes: rdma_server sends its own zeroed buffer. Here the
// server sends back what it received, and the client checks that.
const (
	EchoPort = 7471
	EchoLen  = 16
	// echoIRDORD is what rdma_client asks for with no conn_param: siw's
	// device maximum.
	echoIRDORD = 128
)

// EchoConfig is an echo session's parameters.
type EchoConfig struct {
	// Count is the clients a server serves before it returns, or the
	// connections (one exchange each) a client makes.
	Count int
	Port  uint16
	Options
	Out io.Writer // one line per completed exchange (may be nil)
}

func (c *EchoConfig) check() error {
	if c.Count < 1 {
		return fmt.Errorf("rdmatool: echo count %d, want at least 1", c.Count)
	}
	if c.Port == 0 {
		c.Port = EchoPort
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// EchoClient is rdma_client, cfg.Count times: each time it connects to
// dst, sends EchoLen bytes, receives the server's EchoLen bytes and
// disconnects. It returns the exchanges completed.
func EchoClient(ctx context.Context, v *verbs.Provider, dst netip.AddrPort, cfg EchoConfig) (int, error) {
	if err := cfg.check(); err != nil {
		return 0, err
	}
	for i := 0; i < cfg.Count; i++ {
		if err := echoOnce(ctx, v, dst, cfg, i); err != nil {
			return i, fmt.Errorf("exchange %d: %w", i, err)
		}
	}
	return cfg.Count, nil
}

func echoOnce(ctx context.Context, v *verbs.Provider, dst netip.AddrPort, cfg EchoConfig, i int) error {
	s, err := newSession(v, 2*EchoLen)
	if err != nil {
		return err
	}
	defer s.close()
	setup := func(qp *verbs.QP) error { return s.postRecv(qp, 0, EchoLen, EchoLen) }
	if s.qp, err = v.DialRDMA(ctx, dst, s.attr(cfg.Options, echoIRDORD, echoIRDORD, setup)); err != nil {
		return err
	}
	if err := settle(ctx); err != nil {
		return err
	}
	copy(s.buf.Bytes(), fmt.Appendf(nil, "emunic echo %d", i))
	if err := s.send(ctx, 0, EchoLen); err != nil {
		return err
	}
	c, err := s.await(ctx, rings.WCRecv)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "exchange %d with %v: sent %d bytes, received %d bytes\n", i, dst, EchoLen, c.ByteLen)
	return s.qp.Disconnect(ctx)
}

// EchoServer is rdma_server for cfg.Count clients in turn: it listens on
// cfg.Port, and for each client receives EchoLen bytes, sends them back
// and disconnects. It returns the clients served.
func EchoServer(ctx context.Context, v *verbs.Provider, cfg EchoConfig, ready func()) (int, error) {
	if err := cfg.check(); err != nil {
		return 0, err
	}
	// One buffer per connection slot; the listener's Setup posts the
	// receive of the connection it makes.
	s, err := newSession(v, EchoLen)
	if err != nil {
		return 0, err
	}
	defer s.close()
	setup := func(qp *verbs.QP) error { return s.postRecv(qp, 0, 0, EchoLen) }
	l, err := v.ListenRDMA(cfg.Port, s.attr(cfg.Options, echoIRDORD, echoIRDORD, setup))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	if ready != nil {
		ready()
	}
	for i := 0; i < cfg.Count; i++ {
		qp, err := l.Accept(ctx)
		if err != nil {
			return i, err
		}
		s.qp = qp
		err = s.echo(ctx)
		_ = qp.Close()
		s.qp = nil
		if err != nil {
			return i, fmt.Errorf("client %d (%v): %w", i, qp.RemoteAddr(), err)
		}
		fmt.Fprintf(cfg.Out, "client %d (%v): received %d bytes, sent them back\n", i, qp.RemoteAddr(), EchoLen)
	}
	return cfg.Count, nil
}

// echo answers one client's message.
func (s *session) echo(ctx context.Context) error {
	c, err := s.await(ctx, rings.WCRecv)
	if err != nil {
		return err
	}
	if c.ByteLen > EchoLen {
		return fmt.Errorf("rdmatool: the client sent %d bytes, want at most %d", c.ByteLen, EchoLen)
	}
	return s.send(ctx, 0, int(c.ByteLen))
}

// ucmatose (librdmacm/examples/cmatose.c), one connection: both sides post
// Count receives of Size bytes before connecting or accepting; the server
// sends Count messages of Size bytes, the client receives them all and then
// sends Count back, and the server disconnects. Only Sends; nobody looks at
// the bytes (here both sides check the count and the lengths).
//
// The server speaks first. RFC 5044 has a responder send nothing before the
// initiator's first FPDU, so an initiator that sends nothing first (siw's
// ucmatose client without peer-to-peer mode) and a responder that keeps
// the rule (this one) wait for each other; RFC 6581's peer-to-peer mode
// (the initiator's RTR) is what lets it run. siw as responder sends at once
// (it does not keep the rule), so this client works against it either way.
const (
	CmatosePort = 7471
)

// CmatoseConfig is a ucmatose session's parameters.
type CmatoseConfig struct {
	Count int // messages each way (ucmatose -C)
	Size  int // bytes per message (ucmatose -S)
	Port  uint16
	Options
	Out io.Writer
}

func newCmatoseSession(v *verbs.Provider, cfg *CmatoseConfig) (*session, func(*verbs.QP) error, error) {
	switch {
	case cfg.Count < 1 || cfg.Count > 64:
		return nil, nil, fmt.Errorf("rdmatool: ucmatose count %d, want 1 to 64", cfg.Count)
	case cfg.Size < 1 || cfg.Size > 1<<16:
		return nil, nil, fmt.Errorf("rdmatool: ucmatose size %d, want 1 to 65536", cfg.Size)
	}
	if cfg.Port == 0 {
		cfg.Port = CmatosePort
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	// Receive slots, then one send buffer.
	s, err := newSession(v, (cfg.Count+1)*cfg.Size)
	if err != nil {
		return nil, nil, err
	}
	return s, func(qp *verbs.QP) error {
		for i := 0; i < cfg.Count; i++ {
			if err := s.postRecv(qp, uint64(i), i*cfg.Size, cfg.Size); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// recvAll waits for n receives of size bytes each.
func (s *session) recvAll(ctx context.Context, n, size int) error {
	for i := 0; i < n; i++ {
		c, err := s.await(ctx, rings.WCRecv)
		if err != nil {
			return fmt.Errorf("message %d of %d: %w", i, n, err)
		}
		if int(c.ByteLen) != size {
			return fmt.Errorf("message %d of %d has %d bytes, want %d", i, n, c.ByteLen, size)
		}
	}
	return nil
}

// sendAll sends n messages of size bytes from the send buffer at off.
func (s *session) sendAll(ctx context.Context, n, off, size int) error {
	for i := 0; i < n; i++ {
		if err := s.send(ctx, off, size); err != nil {
			return fmt.Errorf("send %d of %d: %w", i, n, err)
		}
	}
	return nil
}

// CmatoseServer is ucmatose's server for one client on cfg.Port.
func CmatoseServer(ctx context.Context, v *verbs.Provider, cfg CmatoseConfig, ready func()) error {
	s, setup, err := newCmatoseSession(v, &cfg)
	if err != nil {
		return err
	}
	defer s.close()
	l, err := v.ListenRDMA(cfg.Port, s.attr(cfg.Options, 1, 1, setup))
	if err != nil {
		return err
	}
	defer l.Close()
	if ready != nil {
		ready()
	}
	if s.qp, err = l.Accept(ctx); err != nil {
		return err
	}
	if err := s.sendAll(ctx, cfg.Count, cfg.Count*cfg.Size, cfg.Size); err != nil {
		return err
	}
	if err := s.recvAll(ctx, cfg.Count, cfg.Size); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "ucmatose server: sent %d and received %d messages of %d bytes\n", cfg.Count, cfg.Count, cfg.Size)
	return s.qp.Disconnect(ctx)
}

// CmatoseClient is ucmatose's client (-s): it receives cfg.Count
// messages, sends as many back, and waits for the server to disconnect.
func CmatoseClient(ctx context.Context, v *verbs.Provider, dst netip.AddrPort, cfg CmatoseConfig) error {
	s, setup, err := newCmatoseSession(v, &cfg)
	if err != nil {
		return err
	}
	defer s.close()
	if s.qp, err = v.DialRDMA(ctx, dst, s.attr(cfg.Options, 1, 1, setup)); err != nil {
		return err
	}
	if err := s.recvAll(ctx, cfg.Count, cfg.Size); err != nil {
		return err
	}
	if err := s.sendAll(ctx, cfg.Count, cfg.Count*cfg.Size, cfg.Size); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "ucmatose client: received %d and sent %d messages of %d bytes\n", cfg.Count, cfg.Count, cfg.Size)
	// The server disconnects; wait for it a while.
	wctx, cancel := context.WithTimeout(ctx, clientCloseWait)
	defer cancel()
	_ = s.qp.WaitClosed(wctx)
	return nil
}
