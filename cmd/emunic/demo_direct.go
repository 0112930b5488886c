package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/emunic/emunic/tcpstack/direct"
)

// demoPortDirect is the port B's sockets-direct listener takes (the RDMA
// connection itself goes to the switch port, direct.DefaultSwitchPort).
const demoPortDirect = 5003

// directTransfer moves cfg.Bytes from A to B over sockets direct: A dials
// B's sockets-direct listener; the connection must take the RDMA path (a
// fallback to TCP fails the path, with the reason).
func directTransfer(ctx context.Context, lab *demoLab, cfg demoConfig) (res transferResult, err error) {
	defer direct.Shutdown(lab.a)
	defer direct.Shutdown(lab.b)
	l, err := direct.Listen(lab.b, demoPortDirect, direct.Config{})
	if err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	defer l.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := l.Accept()
		acc <- accepted{c, err}
	}()
	dctx, cancel := context.WithTimeout(ctx, cfg.Idle)
	defer cancel()
	c, err := direct.Dial(dctx, lab.a, netip.AddrPortFrom(demoAddrB.Addr(), demoPortDirect), direct.Config{})
	if err != nil {
		l.Close()
		return res, fmt.Errorf("A: %w", err)
	}
	defer c.Close()
	var a accepted
	select {
	case a = <-acc:
	case <-dctx.Done():
		return res, fmt.Errorf("B accepted no connection: %w", dctx.Err())
	}
	if a.err != nil {
		return res, fmt.Errorf("B: %w", a.err)
	}
	defer a.c.Close()
	if p := direct.PathOf(c); p.Path != direct.PathRDMA {
		return res, fmt.Errorf("the connection took the %v", p)
	}
	return moveData(ctx, c, a.c, cfg)
}
