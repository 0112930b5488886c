package tcpstack

import (
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
	mem, err := rings.NewArena(MemorySize(1500, cfg.Driver))
	if err != nil {
		p.Close()
		return nil, err
	}
	dc := nic.Config{MAC: mac, MTU: 1500}
	dc.Engine.MinRTO = 20e6 // board.DefaultMinRTO
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
