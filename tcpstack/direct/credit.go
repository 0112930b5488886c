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
// sides, the two would answer each other for ever, and rules that stop
// the ping-pong leave a side at zero credits owed nothing (an exhaustive
// search of such rules found none without one or the other). Instead each
// side posts CreditSlots receive buffers beyond its pool for them, and
// may have at most that many credit-only messages the peer has not yet
// acknowledged; every message carries, in UAcks, how many credit-only
// messages its sender consumed (and re-posted the buffer of) since its
// previous message.
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
//  3. A credit-only message is sent when credits are owed, a credit-only
//     slot of the peer is free (fewer than CreditSlots unacknowledged;
//     the last one only for a message that acknowledges some of the
//     peer's, so acknowledgements always have a message to ride on), and
//     either many are owed (the threshold, batching) or the peer may
//     be starved: the buffers still available to it (posted and granted,
//     counting grants in flight) are at most Reserve, so it cannot send
//     data.

// creditState is one side's accounting. Not safe for concurrent use: the
// conn guards it with its lock.
type creditState struct {
	pool      int // our receive buffers that credits cover (R)
	peerPool  int // the peer's (our initial credits)
	reserve   int // credits data may not take (K)
	threshold int // owed credits worth a credit-only message by themselves
	slots     int // credit-only messages the peer may have unacknowledged (its slots, at least 2)
	mySlots   int // our credit-only slots

	cred  int // messages this side may send now
	owe   int // own buffers re-posted, not yet granted back
	held  int // own buffers whose data the application has not read
	uOut  int // credit-only messages sent, not yet acknowledged
	uDone int // credit-only messages received and re-posted, not yet acknowledged
}

// msgClass sorts control messages for the credit rules.
type msgClass uint8

const (
	classData   msgClass = iota // carries stream bytes: needs > reserve, held until read
	classCtl                    // must go (RDMA done, sink advert, FIN): may use the reserve
	classCredit                 // credit-only: no credit, a credit-only slot
)

func newCreditState(pool, reserve, threshold, slots int) creditState {
	return creditState{pool: pool, peerPool: pool, reserve: reserve, threshold: threshold, slots: slots, mySlots: slots, cred: pool}
}

// canSend says whether a message of class c may be sent now.
func (s *creditState) canSend(c msgClass) bool {
	switch c {
	case classData:
		return s.cred > s.reserve
	case classCtl:
		return s.cred >= 1
	default:
		return s.wantUpdate()
	}
}

// wantUpdate says whether a credit-only message should go now (rule 3).
func (s *creditState) wantUpdate() bool {
	switch {
	case s.owe < 1 || s.uOut >= s.slots:
		return false
	case s.uOut == s.slots-1 && s.uDone == 0:
		// The last slot carries acknowledgements only: with every slot
		// used on both sides, acknowledgements owed both ways would have
		// no message to ride on (the model finds it).
		return false
	}
	return s.owe >= s.threshold || s.peerAvail() <= s.reserve
}

// peerAvail is the buffers available to the peer: granted (or granted in
// flight) and not yet used.
func (s *creditState) peerAvail() int { return s.pool - s.owe - s.held }

// send accounts for a message of class c going out and returns what it
// carries: the grant (every owed credit) and the acknowledgement of
// credit-only messages.
func (s *creditState) send(c msgClass) (grant, uAcks uint32) {
	if c == classCredit {
		s.uOut++
	} else {
		s.cred--
	}
	grant, uAcks = uint32(s.owe), uint32(s.uDone)
	s.owe, s.uDone = 0, 0
	return grant, uAcks
}

// granted applies what a message carried. It fails if the peer grants
// more than it could owe (more than the pool), or acknowledges more
// credit-only messages than were sent.
func (s *creditState) granted(g, uAcks uint32) bool {
	if uint64(g) > uint64(s.peerPool-s.cred) || uint64(uAcks) > uint64(s.uOut) {
		return false
	}
	s.cred += int(g)
	s.uOut -= int(uAcks)
	return true
}

// received accounts for a message the peer sent into one of our buffers.
// It fails if the peer had no credit (or credit-only slot) for it.
func (s *creditState) received(c msgClass) bool {
	switch c {
	case classCredit:
		if s.uDone >= s.mySlots {
			return false
		}
		s.uDone++
		return true
	case classData:
		if s.owe+s.held >= s.pool {
			return false
		}
		s.held++
	default:
		if s.owe+s.held >= s.pool {
			return false
		}
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
