package services

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// QOTDPort is the Quote of the Day service's port (RFC 865).
const QOTDPort = 17

// Quotes are the quotations a QOTD server sends, in turn. RFC 865 asks for
// at most 512 characters of ASCII; each ends with CR LF.
var Quotes = []string{
	"Be conservative in what you do, be liberal in what you accept from others. (RFC 793)\r\n",
	"The network is reliable. The network is secure. Latency is zero. (the fallacies of distributed computing)\r\n",
	"If you want to go fast, go alone; if you want to go far, offload the protocol. (after a proverb)\r\n",
	"A TIME-WAIT state is not a bug: it is the last ACK's insurance policy. (folklore)\r\n",
	"There are only two hard things in networking: flow control, naming, and off-by-one errors. (folklore)\r\n",
}

// QOTDLinger bounds how long a QOTD server waits, after its FIN, for the
// client's.
const QOTDLinger = 10 * time.Second

// NewQOTD returns a Quote of the Day server (RFC 865): on each connection
// it sends one short quotation and closes its side first (FIN; the
// HTTP/1.0 pattern, so the server's end goes through TIME_WAIT). Anything
// the client sends is read and thrown away until its FIN (or QOTDLinger):
// closing with unread bytes would reset the connection instead. logf may be
// nil.
func NewQOTD(logf Logf) *Server {
	var next atomic.Uint64
	return newServer("qotd", func(c net.Conn, in, out *atomic.Uint64) error {
		q := Quotes[(next.Add(1)-1)%uint64(len(Quotes))]
		n, err := c.Write([]byte(q))
		out.Add(uint64(n))
		if err != nil {
			return err
		}
		cw, ok := c.(interface{ CloseWrite() error })
		if !ok {
			return nil
		}
		if err := cw.CloseWrite(); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(QOTDLinger))
		k, _ := io.Copy(io.Discard, c)
		in.Add(uint64(k))
		return nil
	}, logf)
}

// IsQuote reports whether b is one whole quotation a QOTD server sends.
func IsQuote(b []byte) bool {
	for _, q := range Quotes {
		if string(b) == q {
			return true
		}
	}
	return false
}
