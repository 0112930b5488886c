package tests

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

// The virtio-net baseline's addresses: its own TAP and subnet in the rig's
// namespace, beside the device's.
const (
	virtioPeerIP = "10.98.0.1"
	virtioIP     = "10.98.0.2"
	virtioSink   = 5003
	virtioSource = 5004
)

// BenchmarkGuestNetdev: one QEMU guest (TCG) with two NICs, emunic0
// (emunic.ko on 'emunic device --ivshmem', its port a TAP) and eth0
// (QEMU's virtio-net on a TAP, offloads as a guest has them by default),
// each with a kernel peer in one namespace. The guest sends 64 MiB to its
// peer and takes 64 MiB from it on each NIC in turn; the peer times each
// transfer. Reported: MB/s each way on each, and emunic's over virtio's
// (the mean of the two directions' ratios): what the model costs against
// QEMU's own NIC. Under TCG the absolute figures mean little. One guest
// boot per iteration: run it with -benchtime 1x.
func BenchmarkGuestNetdev(b *testing.B) {
	run := requireGuestVM(b)
	const n = 64 << 20
	exe := buildEmunic(b)
	g := newGuestRig(b, exe)
	vtap := uniqueName("gvv", 10)
	testutil.IP(b, "-n", g.ns.name, "tuntap", "add", "dev", vtap, "mode", "tap")
	testutil.IP(b, "-n", g.ns.name, "addr", "add", virtioPeerIP+"/24", "dev", vtap)
	testutil.IP(b, "-n", g.ns.name, "link", "set", vtap, "up")
	script := `head -c ` + strconv.Itoa(n) + ` /dev/urandom >/tmp/out
nc ` + guestPeerIP + ` ` + strconv.Itoa(guestSink) + ` </tmp/out || exit 11
nc -l -p ` + strconv.Itoa(guestSource) + ` >/dev/null || exit 12
nc ` + virtioPeerIP + ` ` + strconv.Itoa(virtioSink) + ` </tmp/out || exit 13
nc -l -p ` + strconv.Itoa(virtioSource) + ` >/dev/null || exit 14`
	var sum [4]float64 // MB/s: emunic out, in, virtio out, in
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		eOut := guestSinkServer(b, g.ns, fmt.Sprintf("%s:%d", guestPeerIP, guestSink))
		vOut := guestSinkServer(b, g.ns, fmt.Sprintf("%s:%d", virtioPeerIP, virtioSink))
		eDone, vDone := make(chan struct{}), make(chan struct{})
		eIn := guestSourceClient(ctx, g.ns, fmt.Sprintf("%s:%d", guestIP, guestSource), n, eDone)
		vIn := guestSourceClient(ctx, g.ns, fmt.Sprintf("%s:%d", virtioIP, virtioSource), n, vDone)
		type result struct {
			console string
			err     error
		}
		vm := make(chan result, 1)
		go func() {
			c, err := bootGuest(ctx, b, run, g, script, "--virtio-tap", vtap, "--virtio-ip", virtioIP+"/24")
			vm <- result{c, err}
		}()
		// Each source starts once the sink before it has its bytes: the
		// guest takes one transfer at a time.
		xs := make([]guestXfer, 4)
		xs[0] = <-eOut
		close(eDone)
		xs[1] = <-eIn
		xs[2] = <-vOut
		close(vDone)
		xs[3] = <-vIn
		r := <-vm
		cancel()
		if r.err != nil {
			b.Fatalf("the guest failed: %v\n%s", r.err, r.console)
		}
		for j, x := range xs {
			if x.err != nil || x.n != n {
				b.Fatalf("transfer %d: %d bytes, %v", j, x.n, x.err)
			}
			sum[j] += float64(n) / x.took.Seconds() / 1e6
		}
	}
	b.StopTimer()
	k := float64(b.N)
	b.ReportMetric(sum[0]/k, "emunic-out-MB/s")
	b.ReportMetric(sum[1]/k, "emunic-in-MB/s")
	b.ReportMetric(sum[2]/k, "virtio-out-MB/s")
	b.ReportMetric(sum[3]/k, "virtio-in-MB/s")
	b.ReportMetric((sum[0]/sum[2]+sum[1]/sum[3])/2, "emunic/virtio")
	g.stop()
}
