package lwio

import (
	"net/netip"
	"testing"
)

// TestInstanceAddr: an instance's HostAddress is an IPv4 (4 bytes) or
// IPv6 (16 bytes) address; any other length, an IPv4-mapped or an
// unspecified address is no instance.
func TestInstanceAddr(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{[]byte{10, 0, 0, 2}, "10.0.0.2"},
		{netip.MustParseAddr("fd00::2").AsSlice(), "fd00::2"},
		{netip.MustParseAddr("::ffff:10.0.0.2").AsSlice(), ""},
		{netip.IPv6Unspecified().AsSlice(), ""},
		{[]byte{0, 0, 0, 0}, ""},
		{[]byte{10, 0, 0, 2, 0}, ""},
		{nil, ""},
	} {
		a, ok := instanceAddr(c.b)
		if got := map[bool]string{true: a.String(), false: ""}[ok]; got != c.want {
			t.Errorf("% x: %q, want %q", c.b, got, c.want)
		}
	}
}
