package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// TestDemoIPv6: 'emunic demo --ipv6' runs all six paths over IPv6, each
// host's NIC in a device process of its own: the data arrives intact on
// each, no frame is dropped as bad (a checksum, an EtherType, an IPv6
// header the NIC refused), and every TCP segment in the capture of A's
// port is IPv6 (none of the paths fell back to the hosts' IPv4
// addresses). (A split run's engines may count a late segment or two as
// out of window or for TIME_WAIT, over either family: not asserted.)
func TestDemoIPv6(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "v6.pcap")
	code, out, errOut := runCLI(t, "demo", "--ipv6", "--path", "all", "--rdma", "--lwio", "--split", "--bytes", "2MiB", "--pcap", pcap)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"from A fd00::1 to B fd00::2",
		"ok: 2.0 MiB arrived intact on each of the 6 paths",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	i := strings.Index(out, "drops and errors")
	if i < 0 {
		t.Fatalf("no drops and errors section:\n%s", out)
	}
	drops := out[i:]
	drops, _, _ = strings.Cut(drops, "\n\n")
	for _, bad := range []string{"ipv6", "ethertype", "checksum", "bad", "crc"} {
		if strings.Contains(drops, bad) {
			t.Errorf("a drop counter with %q:\n%s", bad, drops)
		}
	}
	frames, err := readPcap(pcap)
	if err != nil {
		t.Fatal(err)
	}
	var tcp4, tcp6 int
	for _, f := range frames {
		if len(f.data) < hdr.EthernetSize+hdr.IPv6Size {
			continue
		}
		switch hdr.Ethernet(f.data).Type() {
		case hdr.EtherTypeIPv4:
			if hdr.IPv4(f.data[hdr.EthernetSize:]).Proto() == hdr.ProtoTCP {
				tcp4++
			}
		case hdr.EtherTypeIPv6:
			if hdr.IPv6(f.data[hdr.EthernetSize:]).NextHeader() == hdr.ProtoTCP {
				tcp6++
			}
		}
	}
	if tcp4 != 0 || tcp6 < 1000 {
		t.Errorf("capture: %d TCP frames over IPv4, %d over IPv6; want none and the demo's", tcp4, tcp6)
	}
}
