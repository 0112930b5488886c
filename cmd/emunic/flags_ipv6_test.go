package main

import (
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
)

// TestCLIEndpointForms: a peer is an IPv4 or IPv6 address, bare or (IPv6)
// bracketed, with an optional port; anything else is a clear error.
func TestCLIEndpointForms(t *testing.T) {
	for in, want := range map[string]string{
		"10.9.0.1":             "10.9.0.1",
		" 10.9.0.1 ":           "10.9.0.1",
		"10.9.0.1:4445":        "10.9.0.1:4445",
		"fd00:9::1":            "fd00:9::1",
		"[fd00:9::1]":          "fd00:9::1",
		"[fd00:9::1]:4445":     "[fd00:9::1]:4445",
		"fd00:9::1:4445":       "fd00:9::1:4445", // eight groups: an address, not a port
		"[fe80::1]:7":          "[fe80::1]:7",
		"2001:db8::10.9.0.1":   "2001:db8::a09:1",
		"[2001:db8::a09:1]:99": "[2001:db8::a09:1]:99",
	} {
		var v endpointValue
		if err := v.Set(in); err != nil || v.String() != want {
			t.Errorf("%q: %q, %v; want %q", in, v.String(), err, want)
		}
	}
	for in, msg := range map[string]string{
		"":                  "not an IPv4 or IPv6 address",
		"host.example":      "not an IPv4 or IPv6 address",
		"10.9.0.1:0":        "bad port",
		"10.9.0.1:70000":    "bad port",
		"10.9.0.1:":         "bad port",
		"[fd00::1]:":        "bad port",
		"[fd00::1]x":        "not IP, [IPv6]",
		"[fd00::1":          "without its ']'",
		"[10.9.0.1]:7":      "not an IPv6 address inside the brackets",
		"fe80::1%eth0":      "a zone is not taken",
		"::ffff:10.9.0.1":   "IPv4-mapped",
		"[::ffff:10.0.0.1]": "IPv4-mapped",
	} {
		var v endpointValue
		if err := v.Set(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want one containing %q", in, err, msg)
		}
	}
}

// TestCLIIPv6Peers: rdma, lwio and serve take IPv6 servers and gateways,
// checked against the host's IPv6 subnets, and a port in the server's
// address stands for --port or --pipe-port.
func TestCLIIPv6Peers(t *testing.T) {
	dual := []string{"--tap", "t0", "--addr", "10.77.1.5/24", "--addr", "fd00:77::5/64"}
	rc, err := parseRDMAToolFlags("ping", append(dual, "--server", "fd00:77::2"), io.Discard)
	if err != nil || rc.Server != netip.MustParseAddr("fd00:77::2") || rc.Port == 0 {
		t.Errorf("rdma ping --server fd00:77::2: %+v, %v", rc, err)
	}
	rc, err = parseRDMAToolFlags("echo", append(dual, "--server", "[fd00:77::2]:9999"), io.Discard)
	if err != nil || rc.Server != netip.MustParseAddr("fd00:77::2") || rc.Port != 9999 {
		t.Errorf("rdma echo --server [fd00:77::2]:9999: %+v, %v", rc, err)
	}
	rc, err = parseRDMAToolFlags("echo", append(dual, "--server", "10.77.1.2:9998", "--port", "9998"), io.Discard)
	if err != nil || rc.Port != 9998 {
		t.Errorf("rdma echo with the same port twice: %+v, %v", rc, err)
	}
	lc, err := parseLWIOFlags("ls", append(dual, "--server", "[fd00:77::1]:5445", "--gateway", "fd00:77::ff"), io.Discard)
	if err != nil || lc.Server != netip.MustParseAddr("fd00:77::1") || lc.PipePort != 5445 || lc.Gateway != netip.MustParseAddr("fd00:77::ff") {
		t.Errorf("lwio ls over IPv6: %+v, %v", lc, err)
	}
	sc, err := parseServeFlags(append(dual, "--gateway", "fe80::1"), io.Discard)
	if err != nil || sc.Gateway != netip.MustParseAddr("fe80::1") {
		t.Errorf("serve --gateway fe80::1: %+v, %v", sc, err)
	}
	sc, err = parseServeFlags(append(dual, "--gateway", "[fd00:77::1]"), io.Discard)
	if err != nil || sc.Gateway != netip.MustParseAddr("fd00:77::1") {
		t.Errorf("serve --gateway [fd00:77::1]: %+v, %v", sc, err)
	}
	v4only := []string{"--tap", "t0", "--addr", "10.77.1.5/24"}
	for _, c := range []struct {
		parse func() error
		msg   string
	}{
		{func() error {
			_, err := parseRDMAToolFlags("ping", append(v4only, "--server", "fd00:77::2"), io.Discard)
			return err
		},
			"bad --server fd00:77::2: not inside 10.77.1.0/24"},
		{func() error {
			_, err := parseRDMAToolFlags("ping", append(dual, "--server", "fd00:78::2"), io.Discard)
			return err
		},
			"not inside 10.77.1.0/24 or fd00:77::/64"},
		{func() error {
			_, err := parseRDMAToolFlags("ping", append(dual, "--server", "fd00:77::5"), io.Discard)
			return err
		},
			"this host's own address"},
		{func() error {
			_, err := parseRDMAToolFlags("ping", append(dual, "--server", "[fd00:77::2]:9999", "--port", "7"), io.Discard)
			return err
		}, "bad --port 7: the server [fd00:77::2]:9999 names port 9999"},
		{func() error {
			_, err := parseLWIOFlags("ls", append(dual, "--server", "10.77.1.1:5445", "--pipe-port", "4445"), io.Discard)
			return err
		}, "bad --pipe-port 4445"},
		{func() error {
			_, err := parseLWIOFlags("ls", append(dual, "--server", "fd00:77::5"), io.Discard)
			return err
		},
			"this host's own address"},
		{func() error {
			_, err := parseServeFlags(append(v4only, "--gateway", "fd00:77::1"), io.Discard)
			return err
		},
			"bad --gateway fd00:77::1: not inside 10.77.1.0/24"},
		{func() error {
			_, err := parseServeFlags(append(dual, "--gateway", "fd00:77::5"), io.Discard)
			return err
		},
			"host's own address"},
		{func() error { _, err := parseServeFlags(append(dual, "--mtu", "1279"), io.Discard); return err },
			"bad --mtu 1279: an IPv6 host needs 1280 or more"},
		{func() error {
			_, err := parseRDMAToolFlags("ping", append(dual, "--listen", "--mtu", "576"), io.Discard)
			return err
		},
			"bad --mtu 576"},
		{func() error {
			_, err := parseLWIOFlags("ls", append(dual, "--server", "fd00:77::1", "--mtu", "1000"), io.Discard)
			return err
		}, "bad --mtu 1000"},
		{func() error { _, err := parseDemoFlags([]string{"--ipv6", "--mtu", "1000"}, io.Discard); return err },
			"bad --mtu 1000: an IPv6 host needs 1280"},
	} {
		err := c.parse()
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("error %v; want a usage error containing %q", err, c.msg)
		}
	}
	// 1280 is enough, and an IPv4-only host may go lower.
	if _, err := parseServeFlags(append(dual, "--mtu", "1280"), io.Discard); err != nil {
		t.Errorf("--mtu 1280 on a dual-stack host: %v", err)
	}
	if _, err := parseServeFlags(append(v4only, "--mtu", "576"), io.Discard); err != nil {
		t.Errorf("--mtu 576 on an IPv4 host: %v", err)
	}
	// --allow takes IPv6 prefixes too.
	dir := t.TempDir()
	lc, err = parseLWIOFlags("serve", append(dual, "--export", dir, "--allow", "fd00:77::/64", "--allow", "fd00:78::9"), io.Discard)
	if err != nil || len(lc.Allow) != 2 || lc.Allow[1] != netip.MustParsePrefix("fd00:78::9/128") {
		t.Errorf("--allow IPv6: %+v, %v", lc.Allow, err)
	}
}
