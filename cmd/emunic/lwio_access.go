package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// LWIO access control on the command line: --key-file on serve and on
// every client command, --read-only and --allow on serve (docs/lwio.md,
// "Access control").

// maxKeyFile bounds a key file: a secret, not a document.
const maxKeyFile = 64 << 10

// readKeyFile returns the secret in file: its bytes, whatever they are,
// less one trailing newline (what an editor or echo leaves).
func readKeyFile(file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	st, err := os.Stat(file)
	if err != nil {
		return nil, usagef("bad --key-file: %v", err)
	}
	if !st.Mode().IsRegular() || st.Size() > maxKeyFile {
		return nil, usagef("bad --key-file %s: want a regular file of at most %d bytes", file, maxKeyFile)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("bad --key-file: %v", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return nil, usagef("bad --key-file %s: it is empty", file)
	}
	return b, nil
}

// allowValue is a repeatable --allow CIDR.
type allowValue struct{ ps []netip.Prefix }

func (v *allowValue) Set(s string) error {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		if a, aerr := netip.ParseAddr(strings.TrimSpace(s)); aerr == nil {
			p, err = netip.PrefixFrom(a, a.BitLen()), nil
		}
	}
	if err != nil {
		return errors.New("not a CIDR such as 10.9.1.0/24 or fd00:9::/64 (or one address)")
	}
	if p.Addr().Zone() != "" || p.Addr().Is4In6() {
		return errors.New("give an IPv4 prefix or an IPv6 one without a zone or IPv4 mapping")
	}
	v.ps = append(v.ps, p.Masked())
	return nil
}

func (v *allowValue) String() string {
	s := make([]string, len(v.ps))
	for i, p := range v.ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// describeAccess is the access part of serve's start-up line.
func describeAccess(secret []byte, readOnly bool, allow []netip.Prefix) string {
	s := "no key file (any client that reaches the pipe port)"
	if secret != nil {
		s = fmt.Sprintf("a %d-byte key", len(secret))
	}
	if readOnly {
		s += ", read-only"
	}
	if len(allow) > 0 {
		s += ", clients from " + (&allowValue{allow}).String()
	}
	return s
}
