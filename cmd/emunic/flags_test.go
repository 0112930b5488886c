package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

func TestCLIParseSize(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"1000000", 1000000},
		{"1", 1},
		{"64MiB", 64 << 20},
		{"64mib", 64 << 20},
		{"64M", 64 << 20},
		{"1GiB", 1 << 30},
		{"1G", 1 << 30},
		{"4KiB", 4096},
		{"500KB", 500000},
		{"2MB", 2000000},
		{"1GB", 1000000000},
		{"1TiB", 1 << 40},
		{"1.5GiB", 3 << 29},
		{"512B", 512},
		{" 8 MiB ", 8 << 20},
		{"0", 0},
	}
	for _, c := range good {
		got, err := parseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "not a size"},
		{"MiB", "not a size"},
		{"-5", "negative"},
		{"12XB", `unknown unit "XB"`},
		{"1.5", "whole number"},
		{"99999999999999999999", "too large"},
		{"100000000TiB", "too large"},
		{"1..2MiB", "not a number"},
	}
	for _, c := range bad {
		_, err := parseSize(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("parseSize(%q) error = %v; want one containing %q", c.in, err, c.msg)
		}
	}
}

func TestCLIFormatSize(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64MiB", 1 << 30: "1GiB", 1000000: "1000000", 4096: "4KiB", 1536: "1536"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCLIDemoFlags(t *testing.T) {
	cfg, err := parseDemoFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bytes != 64<<20 || cfg.MTU != 1500 || cfg.Loss != 0 || cfg.Pcap != "" || cfg.Path != "both" {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseDemoFlags([]string{"--bytes", "1GiB", "--loss", "5%", "--reorder=2.5", "--seed", "7",
		"--pcap", "x.pcap", "--mtu", "9000", "--path", "offload"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := demoConfig{Bytes: 1 << 30, Path: "offload", Loss: 5, Reorder: 2.5, Seed: 7, Pcap: "x.pcap", MTU: 9000, Idle: cfg.Idle}
	if cfg != want {
		t.Errorf("got %+v, want %+v", cfg, want)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--bytes", "12XB"}, `bad --bytes "12XB": unknown unit "XB"`},
		{[]string{"--bytes", "0"}, "bad --bytes 0: must be at least 1 byte"},
		{[]string{"--bytes", "-1"}, `bad --bytes "-1": size cannot be negative`},
		{[]string{"--bytes"}, "--bytes needs a value"},
		{[]string{"--loss", "101"}, `bad --loss "101": a percentage must be between 0 and 100`},
		{[]string{"--loss", "NaN"}, `bad --loss "NaN": a percentage must be between 0 and 100`},
		{[]string{"--reorder", "x"}, `bad --reorder "x": not a percentage`},
		{[]string{"--mtu", "67"}, `bad --mtu "67": an MTU must be between 68 and 65535`},
		{[]string{"--mtu", "65536"}, `bad --mtu "65536"`},
		{[]string{"--seed", "-1"}, `bad --seed "-1": not an unsigned integer`},
		{[]string{"--frobnicate"}, "unknown flag -frobnicate"},
		{[]string{"now"}, `unexpected argument "now"`},
		{[]string{"--path", "rdma"}, `bad --path "rdma": want netstack, offload, both, direct or all`},
		{[]string{"--path"}, "--path needs a value"},
	} {
		_, err := parseDemoFlags(c.args, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: error %v is not a usage error", c.args, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.msg) || strings.Contains(msg, "\n") ||
			!strings.Contains(msg, "emunic demo --help") {
			t.Errorf("%q: error %q; want one line containing %q and the help hint", c.args, msg, c.msg)
		}
	}
}

func TestCLIServeFlags(t *testing.T) {
	cfg, err := parseServeFlags([]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--gateway", "10.9.0.1",
		"--mtu", "9000", "--pcap", "s.pcap", "--vlan", "10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tap != "emu0" || cfg.Addr != netip.MustParsePrefix("10.9.0.2/24") || cfg.Gateway != netip.MustParseAddr("10.9.0.1") ||
		cfg.MTU != 9000 || cfg.Pcap != "s.pcap" || cfg.VLAN != 10 {
		t.Errorf("got %+v", cfg)
	}
	for _, bad := range []string{"4095", "70000", "-1", "x"} {
		if _, err := parseServeFlags([]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--vlan", bad}, io.Discard); err == nil {
			t.Errorf("--vlan %s accepted", bad)
		}
	}
	cfg, err = parseServeFlags([]string{"--tap", "emu0", "--addr", "10.9.0.2/24"}, io.Discard)
	if err != nil || cfg.MTU != 1500 || cfg.Gateway.IsValid() || cfg.Offload || cfg.VLAN != 0 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	// Dual stack: the first IPv4 address is the primary, whatever the order.
	cfg, err = parseServeFlags([]string{"--tap", "emu0", "--addr", "fd00:9::2/64", "--addr", "10.9.0.2/24",
		"--addr", "10.8.0.2/16"}, io.Discard)
	if err != nil || cfg.Addr != netip.MustParsePrefix("10.9.0.2/24") ||
		fmt.Sprint(cfg.MoreAddrs) != "[fd00:9::2/64 10.8.0.2/16]" {
		t.Errorf("several --addr: %+v, %v", cfg, err)
	}
	cfg, err = parseServeFlags([]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--offload"}, io.Discard)
	if err != nil || !cfg.Offload || cfg.MaxConns != 10000 || cfg.Arena != 0 {
		t.Errorf("--offload: %+v, %v", cfg, err)
	}
	cfg, err = parseServeFlags([]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--offload", "--max-conns", "65536", "--arena", "512MiB"}, io.Discard)
	if err != nil || cfg.MaxConns != 65536 || cfg.Arena != 512<<20 {
		t.Errorf("--max-conns, --arena: %+v, %v", cfg, err)
	}
	cfg, err = parseServeFlags([]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--offload", "--congestion", "NewReno"}, io.Discard)
	if err != nil || cfg.Congestion != rings.CCNewReno {
		t.Errorf("--congestion: %+v, %v", cfg, err)
	}
	// The TAP's busy poll: the default, a value, and 0 for none (the
	// port's "off", a negative duration).
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, port.DefaultTAPBusyPoll}, {[]string{"--busy-poll", "20us"}, 20 * time.Microsecond}, {[]string{"--busy-poll", "0"}, -1}} {
		cfg, err = parseServeFlags(append([]string{"--tap", "emu0", "--addr", "10.9.0.2/24"}, c.args...), io.Discard)
		if err != nil || cfg.BusyPoll != c.want {
			t.Errorf("%q: busy poll %v (%v), want %v", c.args, cfg.BusyPoll, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{nil, "--tap NAME is required"},
		{[]string{"--tap", "emu0"}, "--addr CIDR is required"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2"}, "need an address with a prefix length"},
		{[]string{"--tap", "emu0", "--addr", "fd00::2/64"}, "give an IPv4 address too"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--addr", "fe80::2/64"}, "not a unicast address"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--addr", "fd00::2/128"}, "/128"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--addr", "fd00::/64"}, "network address"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--addr", "::ffff:10.9.0.3/120"}, "IPv4-mapped"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--addr", "10.9.0.2/16"}, "given twice"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.0/24"}, "network address"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/32"}, "/32"},
		{[]string{"--tap", "emu0", "--addr", "banana/24"}, "not an address with a prefix length"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--gateway", "10.1.0.1"}, "not inside 10.9.0.0/24"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--gateway", "10.9.0.2"}, "host's own address"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--gateway", "x"}, `bad --gateway "x"`},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--offload=maybe"}, `bad --offload "maybe"`},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--max-conns", "0"}, "bad --max-conns 0"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--congestion", "bbr"}, `bad --congestion "bbr": want cubic or newreno`},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--max-conns", "-5"}, `bad --max-conns "-5"`},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--max-conns", "99999999999"}, "bad --max-conns"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--arena", "1MiB"}, "bad --arena 1MiB: want 16MiB to 64GiB"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--arena", "lots"}, `bad --arena "lots"`},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--busy-poll", "-1us"}, "bad --busy-poll -1µs: want 0 to 10ms"},
		{[]string{"--tap", "emu0", "--addr", "10.9.0.2/24", "--busy-poll", "1s"}, "bad --busy-poll 1s"},
	} {
		_, err := parseServeFlags(c.args, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v; want a one-line usage error containing %q", c.args, err, c.msg)
		}
	}
}

func TestCLIHelpListsEveryFlag(t *testing.T) {
	for _, c := range []struct {
		name  string
		parse func([]string, io.Writer) error
		flags []string
	}{
		{"demo", func(a []string, w io.Writer) error { _, err := parseDemoFlags(a, w); return err },
			[]string{"--bytes SIZE", "--path PATH", "--loss PCT", "--reorder PCT", "--seed N", "--pcap FILE", "--mtu N", "--rdma", "--ipv6", "--help"}},
		{"serve", func(a []string, w io.Writer) error { _, err := parseServeFlags(a, w); return err },
			[]string{"--tap NAME", "--addr CIDR", "--offload", "--max-conns N", "--arena SIZE", "--mtu N", "--gateway IP", "--pcap FILE", "--help"}},
	} {
		for _, h := range []string{"-h", "--help", "-help"} {
			var b strings.Builder
			if err := c.parse([]string{h}, &b); !errors.Is(err, errHelp) {
				t.Errorf("%s %s: error %v, want errHelp", c.name, h, err)
			}
			out := b.String()
			if !strings.HasPrefix(out, "Usage: emunic "+c.name) || !strings.Contains(out, "Examples:") {
				t.Errorf("%s %s: help lacks usage or examples:\n%s", c.name, h, out)
			}
			for _, f := range c.flags {
				if !strings.Contains(out, f) {
					t.Errorf("%s %s: help does not show %q:\n%s", c.name, h, f, out)
				}
			}
		}
	}
}
