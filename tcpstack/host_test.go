package tcpstack

import (
	"testing"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// testHost builds a host on an in-process NIC with MAC mac on port p, as
// package board does for everyone else (board imports this package, so
// this package's own tests build their devices themselves; they are the
// one place tcpstack code names the device's Go types).
func testHost(cfg HostConfig, mac [6]byte, p port.Port) (*Host, error) {
	return testHostWrapped(cfg, mac, p, nil)
}

// testHostWrapped is testHost with wrap, if set, between the driver and
// the device; a wrapped device gets no counter area, so it sees exactly
// the commands the test expects.
func testHostWrapped(cfg HostConfig, mac [6]byte, p port.Port, wrap func(*nic.Device, *rings.Arena) Device) (*Host, error) {
	return testHostDevice(cfg, mac, p, nil, wrap)
}

// testHostDevice is testHostWrapped with devCfg, if set, changing the
// device's configuration before the device is made.
func testHostDevice(cfg HostConfig, mac [6]byte, p port.Port, devCfg func(*nic.Config), wrap func(*nic.Device, *rings.Arena) Device) (*Host, error) {
	mem, err := rings.NewArena(MemorySize(1500, cfg.Driver))
	if err != nil {
		p.Close()
		return nil, err
	}
	dc := nic.Config{MAC: mac, MTU: 1500}
	dc.Engine.MinRTO = 20e6 // board.DefaultMinRTO
	if devCfg != nil {
		devCfg(&dc)
	}
	dev, err := nic.New(dc, mem, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	cfg.ConnTable = rings.DefaultConnTable // the engine's default, which dc keeps
	var d Device = dev
	if wrap != nil {
		d = wrap(dev, mem)
	}
	return newHost(cfg, mem, d, wrap == nil)
}

// offloadPair is two hosts on one in-memory wire, a (10.0.0.1, offload on
// with ocfg) and b (10.0.0.2), both closed when the test ends: devCfg, if
// set, changes a's device configuration, and bPort, if set, wraps b's end
// of the wire.
func offloadPair(t testing.TB, ocfg OffloadConfig, devCfg func(*nic.Config), bPort func(port.Port) port.Port) (a, b *Host) {
	t.Helper()
	pa, pb := port.MustNewWire(port.WireConfig{})
	a, err := testHostDevice(HostConfig{Addr: mustPrefix("10.0.0.1/24")}, [6]byte{2, 0, 0, 0, 0, 1}, pa, devCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	var bp port.Port = pb
	if bPort != nil {
		bp = bPort(pb)
	}
	b, err = testHost(HostConfig{Addr: mustPrefix("10.0.0.2/24")}, [6]byte{2, 0, 0, 0, 0, 2}, bp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := a.Offload(ocfg); err != nil {
		t.Fatal(err)
	}
	return a, b
}
