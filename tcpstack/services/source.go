package services

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
)

// SourcePort is the source service's port: the chargen port (RFC 864),
// whose job it does with pseudo-random bytes instead of lines of text.
const SourcePort = 19

// SourceStream returns the bytes a source server sends on its nth
// connection (0-based), for a client that wants to check them: ChaCha8 keyed
// with n.
func SourceStream(n uint64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], n)
	return rand.NewChaCha8(key)
}

// NewSource returns a source server: on each connection it sends
// pseudo-random bytes (SourceStream of the connection's number) as fast as
// the connection takes them, until the client closes: its FIN (anything it
// sent is read and thrown away) or a reset. Either is a clean end; the
// direction measured is the server's sending, the opposite of discard's.
// logf may be nil.
func NewSource(logf Logf) *Server {
	var next atomic.Uint64
	return newServer("source", func(c net.Conn, in, out *atomic.Uint64) error {
		src := SourceStream(next.Add(1) - 1)
		var clientDone atomic.Bool
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			k, _ := io.Copy(io.Discard, c)
			in.Add(uint64(k))
			clientDone.Store(true)
			// The client closed its side: stop the writer, which may be
			// blocked on a full window.
			c.Close()
		}()
		buf := make([]byte, bufSize)
		var err error
		for {
			src.Read(buf)
			n, werr := c.Write(buf)
			out.Add(uint64(n))
			if werr != nil {
				err = werr
				break
			}
		}
		c.Close()
		<-readDone
		if clientDone.Load() {
			return nil // the client closed: how a source connection ends
		}
		return err
	}, logf)
}
