package tcpstack

import (
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
)

// TestCommandPosted: posted commands (doorbells) more than fill the ring;
// each is reaped without anyone watching it, the ring's slots come back
// (the batches that found it full are placed), the late function runs for
// the one the device refused and for no other, and nothing stays in
// flight.
func TestCommandPosted(t *testing.T) {
	c, _ := newCmdDev(t)
	d := c.d
	n := 2*int(d.rc.Command.Count) + 3
	const refused = 5
	late := make(chan rings.Command, n)
	for k := range n {
		err := d.submitPosted([]cmdReq{{c: rings.Command{Opcode: rings.OpQPDoorbell, Conn: uint32(k)}}}, func(res []rings.Command, err error) {
			if err != nil {
				t.Errorf("command %d: %v", k, err)
			}
			late <- res[0]
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := uint32(0); i < uint32(n); i++ {
		if cmd := c.published(i); cmd.Conn != i {
			t.Fatalf("index %d carries command %d", i, cmd.Conn)
		}
		st := rings.StatusOK
		if i == refused {
			st = rings.StatusBadConn
		}
		c.writeBack(i, st, 0, true)
		c.release(i + 1)
	}
	select {
	case r := <-late:
		if r.Conn != refused || r.Status != rings.StatusBadConn {
			t.Fatalf("late function for command %d (%v), want %d refused", r.Conn, r.Status, refused)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the refused posted command never reached its late function")
	}
	// The lazy reap finishes the rest within postedReapDelay.
	deadline := time.Now().Add(5 * time.Second)
	for d.Stats().CmdInFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d posted commands never reaped", d.Stats().CmdInFlight)
		}
		time.Sleep(postedReapDelay)
	}
	select {
	case r := <-late:
		t.Fatalf("late function ran for command %d (%v), which succeeded", r.Conn, r.Status)
	default:
	}
	d.cp.mu.Lock()
	defer d.cp.mu.Unlock()
	if d.cp.posted != 0 || d.cp.watch != 0 {
		t.Fatalf("posted %d watched %d after the reap", d.cp.posted, d.cp.watch)
	}
}
