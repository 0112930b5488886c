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

// SourcePeriod is the length after which a source stream repeats. The
// first SourcePeriod bytes are ChaCha8 output; after that the server copies
// them again instead of generating more, because generating is what limited
// it: ChaCha8 makes about 1.5 GB/s on one core, so a source sending at
// TCP speed spent a core making bytes, on the same CPUs the (emulated)
// NIC runs on, where a kernel sender writes the same buffer over and over.
// The period is a prime: no whole number of segments, buffers or pages
// shifts the stream onto itself, so a client checking it still sees a
// byte lost, repeated or misplaced.
const SourcePeriod = 1<<20 - 3

// SourceStream returns the bytes a source server sends on its nth
// connection (0-based), for a client that wants to check them: ChaCha8 keyed
// with n, its first SourcePeriod bytes repeated without end.
func SourceStream(n uint64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], n)
	return &sourceStream{gen: rand.NewChaCha8(key)}
}

// sourceStream generates its period as it is read, so a short connection
// pays for only what it sends, then repeats it.
type sourceStream struct {
	gen *rand.ChaCha8
	pat []byte // the period generated so far
	off int    // where the next repeat starts, once pat is whole
}

func (s *sourceStream) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(s.pat) < SourcePeriod {
			k := min(len(p)-n, SourcePeriod-len(s.pat))
			s.gen.Read(p[n : n+k])
			s.pat = append(s.pat, p[n:n+k]...)
			n += k
			continue
		}
		k := copy(p[n:], s.pat[s.off:])
		n += k
		if s.off += k; s.off == SourcePeriod {
			s.off = 0
		}
	}
	return n, nil
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
