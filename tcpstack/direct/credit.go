package direct

// Credit flow control of control messages.
//
// Every control message takes one receive buffer the peer posted. A side
// may send a data or control message only while it holds a credit: a
// buffer of the peer's pool, posted and not yet used. Credits come back in
// the Credits field of every message (piggybacked) and, when nothing else
// goes that way, in a credit-only message (TypeCredit).
//
// A buffer that carried stream data (inline bytes, or the announcement of
// an RDMA transfer) is not given back until the application has read those
// bytes: credits are the stream's flow control too, so a reader that stops
// reading stops the writer. Other messages (RDMA Read done, sink buffer
// advertisements, FIN) are consumed at once and their buffers are owed
// back immediately.
//
// Credit-only messages do not take a credit, or they would need credits
// returned for them in turn: with a pool full of unread data on both
// sides, the two would answer each other for ever, and an exhaustive
// search of rules that stop the ping-pong found none that does not leave a
// side at zero credits owed nothing. Nor are they acknowledged: every
// acknowledgement scheme needs a message to carry it, which needs an
// acknowledgement (the model found both the deadlock and the livelock).
// Instead they are bounded by what they carry: a credit-only message is
// sent only with at least one credit to grant, and every credit granted
// and not yet applied by the peer is one of the granting side's pool, so
// at most Pool credit-only messages can be in flight or not yet re-posted
// (the conn applies a batch's grants and re-posts its buffers under one
// lock, so a grant cannot be used before the buffer that carried it is
// posted again). Each side posts Slots receive buffers beyond its pool for
// them, and a side's pool is at most the peer's Slots minus one (the one:
// the dialler's first message, a credit-only message with nothing to
// grant, which MPA needs to let the listener speak).
//
// The rules, checked exhaustively by TestCreditModel
// (credit_model_test.go) for small pools, with applications that never
// read (the worst case) and with ones that do:
//
//  1. Data needs more than Reserve credits: the last Reserve are kept for
//     control messages, so a side whose peer's buffers are all full of
//     unread data can still say "your RDMA Read is done" or FIN (without
//     the reserve, two writers that each wait for the other's read
//     completion deadlock).
//  2. A control message needs one credit.
//  3. A credit-only message is sent when credits are owed and either many
//     are owed (the threshold, batching) or the peer may be starved: the
//     buffers still available to it (posted and granted, counting grants
//     in flight) are at most Reserve, so it cannot send data.

// creditState is one side's accounting. Not safe for concurrent use: the
// conn guards it with its lock.
type creditState struct {
	pool      int // our receive buffers that credits cover (R)
	peerPool  int // the peer's (our initial credits)
	reserve   int // credits data may not take (K)
	threshold int // owed credits worth a credit-only message by themselves

	cred int // messages this side may send now
	owe  int // own buffers re-posted, not yet granted back
	held int // own buffers whose data the application has not read
}

// msgClass sorts control messages for the credit rules.
type msgClass uint8

const (
	classData   msgClass = iota // carries stream bytes: needs > reserve, held until read
	classCtl                    // must go (RDMA done, sink advert, FIN): may use the reserve
	classCredit                 // credit-only: no credit, grants at least one
)

func newCreditState(pool, reserve, threshold int) creditState {
	return creditState{pool: pool, peerPool: pool, reserve: reserve, threshold: threshold, cred: pool}
}

// canSend says whether a message of class c may be sent now.
func (s *creditState) canSend(c msgClass) bool {
	switch c {
	case classData:
		return s.cred > s.reserve
	case classCtl:
		return s.cred >= 1
	}
	return s.wantUpdate()
}

// wantUpdate says whether a credit-only message should go now (rule 3).
func (s *creditState) wantUpdate() bool {
	return s.owe >= 1 && (s.owe >= s.threshold || s.peerAvail() <= s.reserve)
}

// peerAvail is the buffers available to the peer: granted (or granted in
// flight) and not yet used.
func (s *creditState) peerAvail() int { return s.pool - s.owe - s.held }

// send accounts for a message of class c going out and returns the grant
// it carries: every owed credit.
func (s *creditState) send(c msgClass) uint32 {
	if c != classCredit {
		s.cred--
	}
	g := s.owe
	s.owe = 0
	return uint32(g)
}

// granted applies a grant. It fails if the peer grants more than it could
// owe (more than its pool).
func (s *creditState) granted(g uint32) bool {
	if uint64(g) > uint64(s.peerPool-s.cred) {
		return false
	}
	s.cred += int(g)
	return true
}

// received accounts for a message the peer sent into one of our buffers.
// It fails if the peer had no credit for it.
func (s *creditState) received(c msgClass) bool {
	if c == classCredit {
		return true
	}
	if s.owe+s.held >= s.pool {
		return false
	}
	if c == classData {
		s.held++
	} else {
		s.owe++
	}
	return true
}

// consumed: the application has read all the bytes of one data message.
func (s *creditState) consumed() {
	if s.held > 0 {
		s.held--
		s.owe++
	}
}
