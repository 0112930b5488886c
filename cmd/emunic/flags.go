package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/emunic/emunic/rings"
)

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp means --help was given: the usage has been printed, exit status 0.
var errHelp = errors.New("help requested")

// command describes one subcommand for its help text; its flags live on the
// FlagSet its parse function builds, so the help lists exactly those.
type command struct {
	name     string
	summary  string
	synopsis string // after "emunic NAME "
	about    string // paragraphs shown under the synopsis
	examples string // shown after the flags
}

// newFlagSet returns a FlagSet that reports nothing itself: parse turns its
// errors into one-line usage errors and handles --help.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("emunic "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

var (
	reInvalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)
	reInvalidBool  = regexp.MustCompile(`^invalid boolean value "(.*)" for -([^:]+): `)
	reNeedsArg     = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
	reUndefined    = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
)

// parse parses args into fs. On --help it prints the command's help to
// stdout and returns errHelp; a bad flag becomes a one-line usageError that
// names the flag and what is wrong with it. Positional arguments are refused:
// no command takes any.
func parse(cmd *command, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseWithArgs(cmd, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: 'emunic %s' takes only flags (see 'emunic %s --help')",
			fs.Arg(0), cmd.name, cmd.name)
	}
	return nil
}

// parseWithArgs is parse for a command that takes arguments after its
// flags (fs.Args): --help and bad flags are handled the same way.
func parseWithArgs(cmd *command, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printCommandHelp(stdout, cmd, fs)
		return errHelp
	case err != nil:
		return flagError(cmd, err)
	}
	return nil
}

// pickSub takes a command family's subcommand (lwio, trace, rdma) from
// args[0]: none, or one not in subs, is a usage error listing names; a
// help flag prints the family's help.
func pickSub(family *command, subs map[string]*command, names string, args []string, stdout io.Writer) (string, *command, error) {
	if len(args) == 0 {
		return "", nil, usagef("which one: %s (see 'emunic %s --help')", names, family.name)
	}
	sub := args[0]
	if sub == "-h" || sub == "-help" || sub == "--help" {
		printCommandHelp(stdout, family, nil)
		return "", nil, errHelp
	}
	cmd := subs[sub]
	if cmd == nil {
		return "", nil, usagef("unknown subcommand %q: %s (see 'emunic %s --help')", sub, names, family.name)
	}
	return sub, cmd, nil
}

// flagError turns a FlagSet's parse error into a one-line usage error that
// names the flag and what is wrong with it.
func flagError(cmd *command, err error) error {
	{
		msg := err.Error()
		if m := reInvalidValue.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("bad --%s %q: %s", m[2], m[1], m[3])
		} else if m := reInvalidBool.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("bad --%s %q: a switch is --%s, or --%s=true or --%s=false", m[2], m[1], m[2], m[2], m[2])
		} else if m := reNeedsArg.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("--%s needs a value", m[1])
		} else if m := reUndefined.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("unknown flag -%s", m[1])
		}
		return usagef("%s (see 'emunic %s --help')", msg, cmd.name)
	}
}

// printCommandHelp writes a command's usage: synopsis, description, flags
// (from the FlagSet, so they cannot drift from the code) and examples.
func printCommandHelp(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: emunic %s %s\n\n%s\n", cmd.name, cmd.synopsis, strings.TrimSpace(cmd.about))
	if fs != nil {
		var rows [][2]string
		width := 0
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			left := "--" + f.Name
			if len(f.Name) == 1 {
				left = "-" + f.Name // one letter, as rm -r and mkdir -p spell it
			}
			if name != "" {
				left += " " + name
			}
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			rows = append(rows, [2]string{left, usage})
			width = max(width, len(left))
		})
		rows = append(rows, [2]string{"-h, --help", "show this help"})
		fmt.Fprintf(w, "\nFlags:\n")
		for _, r := range rows {
			fmt.Fprintf(w, "  %-*s  %s\n", max(width, len("-h, --help")), r[0], r[1])
		}
	}
	if cmd.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(cmd.examples, "\n"))
	}
}

// sizeValue is a byte count flag: a plain number of bytes, or a number with a
// unit. KiB, MiB, GiB, TiB (and K, M, G, T) are powers of 1024; KB, MB, GB, TB
// are powers of 1000. Units are case-insensitive; a fraction is allowed with a
// unit ("1.5GiB").
type sizeValue int64

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// parseSize parses a byte count such as "64MiB", "1GiB" or "1000000".
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if strings.HasPrefix(t, "-") {
			return 0, errors.New("size cannot be negative")
		}
		return 0, errors.New("not a size: want a number of bytes with an optional unit, e.g. 1000000, 64MiB, 1GiB")
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB for powers of 1000)", t[i:])
	}
	if unit == "" || unit == "b" {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return 0, errors.New("size too large")
			}
			return 0, errors.New("a size in bytes must be a whole number")
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("not a number: %q", num)
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, errors.New("size too large")
	}
	return int64(v), nil
}

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

func (v *sizeValue) String() string { return formatSize(int64(*v)) }

// formatSize writes n the way a user would type it: "64MiB", "1GiB",
// "1000000" when it is not a whole number of KiB.
func formatSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// percentValue is a percentage between 0 and 100; a trailing "%" is allowed.
type percentValue float64

func (v *percentValue) Set(s string) error {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return errors.New("not a percentage: want a number from 0 to 100, e.g. 5 or 0.5")
	}
	if !(f >= 0 && f <= 100) {
		return errors.New("a percentage must be between 0 and 100")
	}
	*v = percentValue(f)
	return nil
}

func (v *percentValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

// uintValue is an unsigned integer flag with a readable error.
type uintValue uint64

func (v *uintValue) Set(s string) error {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
	if err != nil {
		return errors.New("not an unsigned integer")
	}
	*v = uintValue(n)
	return nil
}

func (v *uintValue) String() string { return strconv.FormatUint(uint64(*v), 10) }

// mtuValue is an IP MTU: 68 (the IPv4 minimum) to 65535.
type mtuValue int

func (v *mtuValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not a whole number")
	}
	if n < 68 || n > 65535 {
		return errors.New("an MTU must be between 68 and 65535")
	}
	*v = mtuValue(n)
	return nil
}

func (v *mtuValue) String() string { return strconv.Itoa(int(*v)) }

// congestionValue is a congestion control's name: cubic or newreno.
type congestionValue rings.CongestionControl

func (v *congestionValue) Set(s string) error {
	c, ok := rings.ParseCongestionControl(strings.ToLower(strings.TrimSpace(s)))
	if !ok {
		return fmt.Errorf("want %v or %v", rings.CCCubic, rings.CCNewReno)
	}
	*v = congestionValue(c)
	return nil
}

func (v *congestionValue) String() string { return rings.CongestionControl(*v).String() }

// prefixValue is the host's addresses, each with its prefix length, from
// one or more --addr flags: IPv4 (10.9.0.2/24) or IPv6 (fd00:9::2/64). The
// first IPv4 one is the primary address p (the MAC is derived from it, and
// the offload paths use it); the others, in order, are more. At least one
// must be IPv4 (check says so).
type prefixValue struct {
	p    netip.Prefix
	more []netip.Prefix
}

func (v *prefixValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		return errors.New("need an address with a prefix length, e.g. 10.9.0.2/24 or fd00:9::2/64")
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return errors.New("not an address with a prefix length, e.g. 10.9.0.2/24 or fd00:9::2/64")
	}
	a := p.Addr()
	switch {
	case a.Is4In6():
		return fmt.Errorf("%v is an IPv4-mapped IPv6 address: give the IPv4 address itself", a)
	case a.Is4() && p.Bits() == 32, a.Is6() && p.Bits() == 128:
		return fmt.Errorf("a /%d leaves no neighbours to talk to; use the TAP subnet's prefix length, e.g. /24 or /64", p.Bits())
	case a.Is6() && (a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsLoopback() || a.IsUnspecified()):
		return fmt.Errorf("%v is not a unicast address this host can be given (the link-local one is made from the MAC)", a)
	case a == p.Masked().Addr():
		return fmt.Errorf("%v is the network address of %v, not a host address", a, p.Masked())
	}
	if v.p.Addr() == a || slices.ContainsFunc(v.more, func(q netip.Prefix) bool { return q.Addr() == a }) {
		return fmt.Errorf("%v is given twice", a)
	}
	if a.Is4() && !v.p.IsValid() {
		v.p = p
	} else {
		v.more = append(v.more, p)
	}
	return nil
}

// check is the rule Set cannot apply one flag at a time: some address
// given must be IPv4.
func (v *prefixValue) check() error {
	if !v.p.IsValid() && len(v.more) > 0 {
		return errors.New("bad --addr: give an IPv4 address too (the host's primary address, e.g. 10.9.0.2/24)")
	}
	return nil
}

func (v *prefixValue) String() string {
	var parts []string
	if v.p.IsValid() {
		parts = append(parts, v.p.String())
	}
	for _, q := range v.more {
		parts = append(parts, q.String())
	}
	return strings.Join(parts, ",")
}

// addrValue is an IP address, IPv4 or IPv6 (a bare IPv6 one, or in
// brackets as in a URL: [fd00:9::1]). An IPv4-mapped IPv6 address is
// refused: the IPv4 one is meant.
type addrValue struct{ a netip.Addr }

func (v *addrValue) Set(s string) error {
	a, err := parseIP(s)
	if err != nil {
		return err
	}
	v.a = a
	return nil
}

func (v *addrValue) String() string {
	if !v.a.IsValid() {
		return ""
	}
	return v.a.String()
}

// parseIP reads an IPv4 or IPv6 address, the latter bare or bracketed.
func parseIP(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if b, ok := strings.CutPrefix(s, "["); ok {
		if s, ok = strings.CutSuffix(b, "]"); !ok {
			return netip.Addr{}, errors.New("not an IP address: a '[' without its ']'")
		}
		if a, err := netip.ParseAddr(s); err != nil || !a.Is6() {
			return netip.Addr{}, errors.New("not an IPv6 address inside the brackets")
		}
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, errors.New("not an IPv4 or IPv6 address")
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%v: a zone is not taken (the host has one interface)", a)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%v is an IPv4-mapped IPv6 address: give the IPv4 address itself", a)
	}
	return a, nil
}

// endpointValue is a peer: an IP address (addrValue's forms) with an
// optional port, 10.9.0.1:4445 or [fd00:9::1]:4445 (an IPv6 address with a
// port needs the brackets). port is 0 when none was given.
type endpointValue struct {
	a    netip.Addr
	port uint16
}

func (v *endpointValue) Set(s string) error {
	s = strings.TrimSpace(s)
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		if i := strings.LastIndex(s, "]"); i >= 0 && i+1 < len(s) {
			if s[i+1] != ':' {
				return errors.New("not IP, [IPv6], IP:PORT or [IPv6]:PORT")
			}
			host, port = s[:i+1], s[i+2:]
		}
	} else if strings.Count(s, ":") == 1 { // IPv4:PORT; more colons are an IPv6 address
		host, port, _ = strings.Cut(s, ":")
	}
	a, err := parseIP(host)
	if err != nil {
		return err
	}
	var p uint64
	if port != "" || strings.HasSuffix(s, ":") {
		if p, err = strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return fmt.Errorf("bad port %q: want 1 to 65535", port)
		}
	}
	v.a, v.port = a, uint16(p)
	return nil
}

func (v *endpointValue) String() string {
	switch {
	case !v.a.IsValid():
		return ""
	case v.port == 0:
		return v.a.String()
	}
	return netip.AddrPortFrom(v.a, v.port).String()
}

// merge settles the port a command talks to from the endpoint's port and
// the port flag (name, value *port, set if given on the command line): the
// endpoint's wins when the flag was not given, and the two must agree when
// both were.
func (v *endpointValue) merge(name string, port *uint64, set bool) error {
	if v.port == 0 {
		return nil
	}
	if set && *port != uint64(v.port) {
		return fmt.Errorf("bad --%s %d: the server %v names port %d", name, *port, v, v.port)
	}
	*port = uint64(v.port)
	return nil
}

// onLink reports whether a is on the subnet of one of the host's
// addresses (the primary p and more) of its family, or is an IPv6
// link-local address (on every link).
func onLink(a netip.Addr, p netip.Prefix, more []netip.Prefix) bool {
	if a.Is6() && a.IsLinkLocalUnicast() {
		return true
	}
	for _, q := range append([]netip.Prefix{p}, more...) {
		if q.IsValid() && q.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// ownAddr reports whether a is one of the host's addresses.
func ownAddr(a netip.Addr, p netip.Prefix, more []netip.Prefix) bool {
	return a == p.Addr() || slices.ContainsFunc(more, func(q netip.Prefix) bool { return q.Addr() == a })
}

// subnets is the host's subnets, for messages.
func subnets(p netip.Prefix, more []netip.Prefix) string {
	var s []string
	for _, q := range append([]netip.Prefix{p}, more...) {
		if q.IsValid() {
			s = append(s, q.Masked().String())
		}
	}
	return strings.Join(s, " or ")
}

// flagSet reports whether flag name was given on fs's command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// addrList is the host's addresses with their prefix lengths, for logs:
// "10.9.0.2/24, fd00:9::2/64".
func addrList(p netip.Prefix, more []netip.Prefix) string {
	s := []string{p.String()}
	for _, q := range more {
		s = append(s, q.String())
	}
	return strings.Join(s, ", ")
}

// ipv6MinMTU is IPv6's minimum link MTU (RFC 8200 §5): a host with an IPv6
// address on a smaller one could send no IPv6 at all.
const ipv6MinMTU = 1280

// checkIPv6MTU refuses an IPv6 address (among more) on a link whose MTU is
// below IPv6's minimum.
func checkIPv6MTU(more []netip.Prefix, mtu int) error {
	if mtu < ipv6MinMTU && slices.ContainsFunc(more, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		return fmt.Errorf("bad --mtu %d: an IPv6 host needs %d or more (IPv6's minimum link MTU)", mtu, ipv6MinMTU)
	}
	return nil
}
