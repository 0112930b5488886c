package verbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
)

// TestCQBusyPoll: with busy polling on, a completion the device produces
// while PollWait spins is returned without ARM_CQ (no command at all) and
// counted as a hit; with nothing coming, the spin ends at its bound and
// PollWait arms the CQ and sleeps as before (an event wakes it); with it
// off, PollWait arms at once.
func TestCQBusyPoll(t *testing.T) {
	v, d := fakeVerbs(t)
	cq, err := v.createCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rings.NewProducer(v.mem, cq.layout, cq.layout.Count, nil)
	if err != nil {
		t.Fatal(err)
	}
	produce := func(wrid uint64) {
		e := dev.Next()
		c := rings.Completion{Opcode: rings.WCRecv, Status: rings.WCSuccess, WRID: wrid, QPN: 3}
		c.Encode(rings.CQEntry(e))
		dev.Commit()
		dev.Publish()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]rings.Completion, 4)
	type res struct {
		n   int
		err error
	}

	// 1. A completion while spinning (the bound is far away).
	cq.SetBusyPoll(time.Hour)
	if cq.BusyPoll() != time.Hour {
		t.Fatalf("BusyPoll %v", cq.BusyPoll())
	}
	got := make(chan res, 1)
	go func() {
		n, err := cq.PollWait(ctx, wc, false)
		got <- res{n, err}
	}()
	// Found by the first poll or by the spin, never after an arm.
	produce(1)
	r := <-got
	if r.err != nil || r.n != 1 || wc[0].WRID != 1 {
		t.Fatalf("PollWait: %d %v %v", r.n, r.err, &wc[0])
	}
	if arms := d.commands(rings.OpArmCQ); len(arms) != 0 {
		t.Fatalf("%d ARM_CQ with busy polling and a completion in time", len(arms))
	}

	// 2. Nothing within the bound: the spin ends, PollWait arms and sleeps
	// until the event.
	const bound = 2 * time.Millisecond
	cq.SetBusyPoll(bound)
	before := cq.Stats()
	start := time.Now()
	go func() {
		n, err := cq.PollWait(ctx, wc, false)
		got <- res{n, err}
	}()
	for len(d.commands(rings.OpArmCQ)) == 0 {
		select {
		case r := <-got:
			t.Fatalf("PollWait returned %d %v with nothing produced", r.n, r.err)
		case <-ctx.Done():
			t.Fatal("PollWait never armed the CQ")
		case <-time.After(bound / 4):
		}
	}
	if spun := time.Since(start); spun < bound {
		t.Fatalf("armed after %v, before the %v spin ended", spun, bound)
	}
	produce(2)
	if !v.Route(&rings.Notification{Flags: rings.NtfCQEvent, Conn: cq.Num()}) {
		t.Fatal("CQ event not consumed")
	}
	r = <-got
	if r.err != nil || r.n != 1 || wc[0].WRID != 2 {
		t.Fatalf("PollWait after the event: %d %v %v", r.n, r.err, &wc[0])
	}
	after := cq.Stats()
	if after.BusySpins-before.BusySpins < 1 || after.BusySpinHits != before.BusySpinHits || after.BusySpinTime-before.BusySpinTime < bound {
		t.Fatalf("stats %+v after %+v: want a spin of at least %v and no hit", after, before, bound)
	}
	if before.BusySpinHits != before.BusySpins {
		t.Fatalf("first wait: %d spins, %d found the completion", before.BusySpins, before.BusySpinHits)
	}

	// A context that ends stops the spin (the bound is an hour).
	cq.SetBusyPoll(time.Hour)
	quick, cancelQuick := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancelQuick()
	if _, err := cq.PollWait(quick, wc, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PollWait spinning past its context: %v", err)
	}
	after = cq.Stats()

	// 3. Off: no spin at all.
	cq.SetBusyPoll(-1)
	arms := len(d.commands(rings.OpArmCQ))
	short, cancelShort := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancelShort()
	if _, err := cq.PollWait(short, wc, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PollWait on an empty CQ: %v", err)
	}
	if s := cq.Stats(); s.BusySpins != after.BusySpins || len(d.commands(rings.OpArmCQ)) != arms+1 {
		t.Fatalf("busy polling off: %d spins (was %d), %d ARM_CQ (was %d)", s.BusySpins, after.BusySpins, len(d.commands(rings.OpArmCQ)), arms)
	}
}
