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
