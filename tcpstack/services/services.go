// Package services holds the small TCP services an emulated host runs so that
// other machines have something to talk to: echo (RFC 862, port 7), discard
// (RFC 863, port 9) and Quote of the Day (RFC 865, port 17; qotd.go).
//
// They work on any net.Listener (a tcpstack host's, or the kernel's), serve
// each connection in its own goroutine, and count what they moved. Close
// stops a server: it closes the listeners it serves and every open
// connection, and waits for their goroutines.
package services

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Well-known ports of the services.
const (
	EchoPort    = 7
	DiscardPort = 9
)

// Logf receives one line per event (connection opened, connection closed).
type Logf func(format string, args ...any)

// Stats counts what a server did.
type Stats struct {
	Accepted uint64 // connections accepted
	Active   uint64 // connections open now
	BytesIn  uint64 // bytes read from clients
	BytesOut uint64 // bytes written to clients
	Errors   uint64 // connections that ended with an error other than a clean close
}

// Server runs one service on one or more listeners.
type Server struct {
	name   string
	handle func(c net.Conn, in, out *atomic.Uint64) error
	logf   Logf

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup

	accepted, active, bytesIn, bytesOut, errs atomic.Uint64
}

// NewEcho returns an echo server: every byte a client sends is sent back,
// and when the client closes its sending side the server finishes sending
// and closes the connection. logf may be nil.
func NewEcho(logf Logf) *Server { return newServer("echo", echo, logf) }

// NewDiscard returns a discard server: it reads and drops everything a
// client sends, and closes the connection when the client does. logf may be
// nil.
func NewDiscard(logf Logf) *Server { return newServer("discard", discard, logf) }

func newServer(name string, h func(net.Conn, *atomic.Uint64, *atomic.Uint64) error, logf Logf) *Server {
	return &Server{
		name: name, handle: h, logf: logf,
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
	}
}

// Name returns "echo", "discard" or "qotd".
func (s *Server) Name() string { return s.name }

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("services: server closed")

// Serve accepts connections on l until l fails or the server is closed, and
// serves each in its own goroutine. It returns ErrServerClosed after Close,
// otherwise the error Accept returned. Serve closes l before returning.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			return fmt.Errorf("%s: accept: %w", s.name, err)
		}
		if !s.track(c) {
			c.Close()
			return ErrServerClosed
		}
		go s.serveConn(c)
	}
}

// track registers c, or reports false when the server is closing.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.accepted.Add(1)
	s.active.Add(1)
	return true
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	peer := c.RemoteAddr()
	s.log("%s: %v connected", s.name, peer)
	start := time.Now()
	var in, out atomic.Uint64
	err := s.handle(c, &in, &out)
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	closing := s.closed
	s.mu.Unlock()
	s.active.Add(^uint64(0))
	s.bytesIn.Add(in.Load())
	s.bytesOut.Add(out.Load())
	d := time.Since(start).Round(time.Millisecond)
	switch {
	case err == nil || closing:
		s.log("%s: %v closed after %s in, %s out (%v)", s.name, peer, Size(in.Load()), Size(out.Load()), d)
	default:
		s.errs.Add(1)
		s.log("%s: %v failed after %s in, %s out (%v): %v", s.name, peer, Size(in.Load()), Size(out.Load()), d, err)
	}
}

func (s *Server) log(format string, args ...any) {
	if s.logf != nil {
		s.logf(format, args...)
	}
}

// Close stops accepting, closes every open connection and waits until all
// connection goroutines have returned. Closing twice is harmless.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Stats returns a snapshot of the server's counters. Bytes are added when a
// connection ends.
func (s *Server) Stats() Stats {
	return Stats{
		Accepted: s.accepted.Load(), Active: s.active.Load(),
		BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load(), Errors: s.errs.Load(),
	}
}

// bufSize is the copy buffer of a connection: large enough that a bulk
// transfer moves in few calls.
const bufSize = 64 << 10

type closeWriter interface{ CloseWrite() error }

func echo(c net.Conn, in, out *atomic.Uint64) error {
	buf := make([]byte, bufSize)
	for {
		n, rerr := c.Read(buf)
		if n > 0 {
			in.Add(uint64(n))
			m, werr := c.Write(buf[:n])
			out.Add(uint64(m))
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			// The client is done sending: everything it sent has been
			// written back; half-close so it reads EOF after the last byte.
			if cw, ok := c.(closeWriter); ok {
				return cw.CloseWrite()
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func discard(c net.Conn, in, _ *atomic.Uint64) error {
	buf := make([]byte, bufSize)
	for {
		n, err := c.Read(buf)
		in.Add(uint64(n))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Size formats a byte count with a binary unit: "512 B", "1.5 KiB",
// "64.0 MiB".
func Size(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}
