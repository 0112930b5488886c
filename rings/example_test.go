package rings_test

import (
	"fmt"
	"runtime"

	"github.com/emunic/emunic/rings"
)

// The host and the device share one arena (host memory) and one command ring
// in it. The host produces commands and waits for each to be done; the device
// goroutine parks until it is kicked, executes each command and writes the
// status back into the entry in place. Only the Layout crosses from one side
// to the other, as it would be programmed into a real device's registers.
func Example() {
	mem, err := rings.NewArena(1 << 16)
	if err != nil {
		panic(err)
	}
	layout, err := rings.AllocRing(mem, 16, rings.CommandEntrySize)
	if err != nil {
		panic(err)
	}
	stats, _ := mem.Alloc(rings.StatBlockSize, 0) // a host buffer for STATS

	deviceBell := rings.NewBell() // the device's doorbell register
	hostBell := rings.NewBell()   // the host's interrupt

	// Device side: it sees host memory only through the DMA interface.
	var dma rings.DMA = mem
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := rings.NewConsumer(dma, layout, 8, hostBell)
		if err != nil {
			panic(err)
		}
		for {
			e, err := c.Peek()
			if err != nil {
				panic(err) // a phase error: the host broke the protocol
			}
			if e == nil {
				c.Park(deviceBell, 100, 0) // spin a little, then sleep until kicked
				continue
			}
			cmd := rings.CommandEntry(e)
			switch cmd.Opcode() {
			case rings.OpNop:
				cmd.SetWriteBack(rings.StatusOK, 0)
			case rings.OpStats:
				blk := make(rings.StatBlock, rings.StatBlockSize)
				blk.Set(rings.StatCmdCompleted, 1)
				n := min(int(cmd.Len()), rings.StatBlockSize)
				if err := dma.WriteAt(blk[:n], cmd.Addr()); err != nil {
					cmd.SetWriteBack(rings.StatusBadAddress, 0)
					break
				}
				cmd.SetWriteBack(rings.StatusOK, uint64(n))
			default:
				cmd.SetWriteBack(rings.StatusBadOpcode, 0)
			}
			c.Complete(e) // status first, then DONE
			c.Pop()
			if cmd.Tag() == 0 { // the host's "stop" cookie
				c.Release()
				return
			}
		}
	}()

	// Host side.
	p, err := rings.NewProducer(mem, layout, 1, deviceBell)
	if err != nil {
		panic(err)
	}
	send := func(c rings.Command) rings.CommandEntry {
		e := p.Next() // nil only when the ring is full
		c.Encode(e)
		i := p.Tail()
		p.Commit() // batch 1: publishes now, kicks the device if it sleeps
		for !rings.IsDone(&p.Ring, i) {
			runtime.Gosched()
		}
		return rings.CommandEntry(e)
	}
	r := send(rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn, Tag: 1})
	fmt.Println(r.Status(), r.Result())
	r = send(rings.Command{Opcode: rings.OpStats, Conn: rings.NoConn, Addr: stats, Len: uint32(rings.StatBlockSize), Tag: 2})
	blk, _ := mem.Map(stats, rings.StatBlockSize)
	fmt.Println(r.Status(), r.Result(), rings.StatCmdCompleted, rings.StatBlock(blk).Get(rings.StatCmdCompleted))
	r = send(rings.Command{Opcode: rings.OpStats, Conn: rings.NoConn, Addr: 0x10, Len: 8, Tag: 3})
	fmt.Println(r.Status())
	r = send(rings.Command{Opcode: 0x7F, Conn: rings.NoConn, Tag: 0})
	fmt.Println(r.Status())
	<-done

	// Output:
	// OK 0
	// OK 272 cmd_completed 1
	// BAD_ADDRESS
	// BAD_OPCODE
}
