package hostrig

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// NodeConfig sizes one host's verbs objects. Zero fields take the defaults
// in brackets.
type NodeConfig struct {
	CQEntries int // the one CQ both queues complete to [512]
	SQDepth   int // send queue depth of the QPs Attr makes [128]
	RecvN     int // receive slots, all posted at QP setup [32]
	RecvSize  int // bytes per receive slot [2048]
	LocalSize int // the local buffer for send and read SGEs [256 KiB]
}

func (c NodeConfig) withDefaults() NodeConfig {
	if c.CQEntries == 0 {
		c.CQEntries = 512
	}
	if c.SQDepth == 0 {
		c.SQDepth = 128
	}
	if c.RecvN == 0 {
		c.RecvN = 32
	}
	if c.RecvSize == 0 {
		c.RecvSize = 2048
	}
	if c.LocalSize == 0 {
		c.LocalSize = 256 << 10
	}
	return c
}

// Node is one host's RDMA objects in a test: the provider, a PD, one CQ,
// receive slots (RecvN × RecvSize, registered for local write) and a local
// buffer (registered for local write) for send, write and read SGEs. QP is
// set by Connect.
type Node struct {
	H       *tcpstack.Host
	V       *verbs.Provider
	PD      verbs.PD
	CQ      *verbs.CQ
	QP      *verbs.QP
	Recv    *verbs.Buffer
	RecvMR  *verbs.MR
	Local   *verbs.Buffer
	LocalMR *verbs.MR
	Cfg     NodeConfig
}

// Must returns a function that unwraps (v, err), failing the test on err.
func Must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// NewNode opens h's verbs and makes the node's objects.
func NewNode(t testing.TB, h *tcpstack.Host, cfg NodeConfig) *Node {
	t.Helper()
	cfg = cfg.withDefaults()
	v := Must[*verbs.Provider](t)(verbs.Open(h))
	n := &Node{H: h, V: v, PD: v.AllocPD(), Cfg: cfg}
	n.CQ = Must[*verbs.CQ](t)(v.CreateCQ(cfg.CQEntries))
	n.Recv = Must[*verbs.Buffer](t)(v.AllocBuffer(cfg.RecvN * cfg.RecvSize))
	n.RecvMR = Must[*verbs.MR](t)(v.RegMR(n.PD, n.Recv, verbs.AccessLocalWrite))
	n.Local = Must[*verbs.Buffer](t)(v.AllocBuffer(cfg.LocalSize))
	n.LocalMR = Must[*verbs.MR](t)(v.RegMR(n.PD, n.Local, verbs.AccessLocalWrite))
	return n
}

// RecvWRID is the work request ID of receive slot s.
func RecvWRID(s int) uint64 { return uint64(1000 + s) }

// PostRecvs posts receive slots on qp, each a whole slot, with WRID
// RecvWRID(slot).
func (n *Node) PostRecvs(qp *verbs.QP, slots ...int) error {
	wrs := make([]rings.RecvWR, len(slots))
	for i, s := range slots {
		wrs[i] = rings.RecvWR{WRID: RecvWRID(s), NumSGE: 1}
		wrs[i].SGL[0] = n.RecvMR.SGE(s*n.Cfg.RecvSize, n.Cfg.RecvSize)
	}
	_, err := qp.PostRecvList(wrs)
	return err
}

// Attr is the QP attributes Connect uses: both queues on the node's CQ,
// every receive slot posted before the QP is connected.
func (n *Node) Attr() verbs.QPAttr {
	return verbs.QPAttr{PD: n.PD, SendCQ: n.CQ, RecvCQ: n.CQ, SQDepth: n.Cfg.SQDepth, RQDepth: n.Cfg.RecvN,
		Setup: func(qp *verbs.QP) error {
			all := make([]int, n.Cfg.RecvN)
			for i := range all {
				all[i] = i
			}
			return n.PostRecvs(qp, all...)
		}}
}

// Slot is the receive slot a receive completion used.
func (n *Node) Slot(c rings.Completion) int { return int(c.WRID - RecvWRID(0)) }

// RecvData is the bytes a receive completion placed in its slot.
func (n *Node) RecvData(c rings.Completion) []byte {
	off := n.Slot(c) * n.Cfg.RecvSize
	return n.Recv.Bytes()[off : off+int(min(int(c.ByteLen), n.Cfg.RecvSize))]
}

// AcceptData is the private data Connect's responder accepts with.
const AcceptData = "welcome"

// Connect makes a QP pair: b listens on port and accepts the request with
// AcceptData, a dials. On return a.QP is RTS and b.QP accepted; both are
// destroyed at cleanup.
func Connect(t testing.TB, a, b *Node, port uint16) {
	t.Helper()
	ConnectAt(t, a, b, b.H.Addr(), port)
}

// ConnectAt is Connect to b's address at (an IPv6 one of a dual-stack
// host, say).
func ConnectAt(t testing.TB, a, b *Node, at netip.Addr, port uint16) {
	t.Helper()
	l := Must[*verbs.RDMAListener](t)(b.V.ListenRDMA(port, b.Attr()))
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	type res struct {
		qp  *verbs.QP
		err error
	}
	acc := make(chan res, 1)
	go func() {
		r, err := l.GetRequest(ctx)
		if err != nil {
			acc <- res{nil, err}
			return
		}
		if s := r.QP().State(); s != verbs.QPStateConnectRequest {
			acc <- res{nil, fmt.Errorf("request QP in %v", s)}
			return
		}
		acc <- res{r.QP(), r.Accept([]byte(AcceptData))}
	}()
	qp, err := a.V.DialRDMA(ctx, netip.AddrPortFrom(at, port), a.Attr())
	if err != nil {
		t.Fatalf("DialRDMA: %v (listener: %d failed, last %v)", err, l.Failed(), l.LastError())
	}
	a.QP = qp
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	b.QP = r.qp
	t.Cleanup(func() { a.QP.Destroy(); b.QP.Destroy() })
	if sa, sb := a.QP.State(), b.QP.State(); sa != verbs.QPStateRTS || sb != verbs.QPStateAccepted {
		t.Fatalf("after connect: states %v / %v", sa, sb)
	}
}

// QPPair is a rig with a Node on each host and a QP between them.
func QPPair(t testing.TB, rc Config, nc NodeConfig, port uint16) (r *Rig, a, b *Node) {
	t.Helper()
	r = New(t, rc)
	a, b = NewNode(t, r.A, nc), NewNode(t, r.B, nc)
	Connect(t, a, b, port)
	return r, a, b
}

// Quiet returns what cq yields until it has stayed empty for about 20 ms:
// the completions a test expects none after (flushes, a fault's fallout).
// Absence cannot be waited for, so this is the one place the rig polls
// with a pause.
func Quiet(cq *verbs.CQ) []rings.Completion {
	var out []rings.Completion
	wc := make([]rings.Completion, 64)
	for quiet := 0; quiet < 20; {
		n := cq.Poll(wc)
		out = append(out, wc[:n]...)
		if n == 0 {
			quiet++
			time.Sleep(time.Millisecond)
		}
	}
	return out
}
