package main

import (
	"context"
	"fmt"
	"net"

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
	c, s, err := dialAccept(ctx, l, cfg, func(ctx context.Context) (net.Conn, error) {
		return direct.Dial(ctx, lab.a, lab.toB(demoPortDirect), direct.Config{})
	})
	if err != nil {
		return res, err
	}
	defer c.Close()
	defer s.Close()
	if p := direct.PathOf(c); p.Path != direct.PathRDMA {
		return res, fmt.Errorf("the connection took the %v", p)
	}
	return moveData(ctx, c, s, cfg)
}

// dialAccept connects A (dial) to B's listener l within cfg.Idle and
// returns both ends.
func dialAccept(ctx context.Context, l net.Listener, cfg demoConfig, dial func(context.Context) (net.Conn, error)) (c, s net.Conn, err error) {
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
	c, err = dial(dctx)
	if err != nil {
		l.Close() // ends the Accept
		return nil, nil, fmt.Errorf("A: %w", err)
	}
	var a accepted
	select {
	case a = <-acc:
	case <-dctx.Done():
		c.Close()
		return nil, nil, fmt.Errorf("B accepted no connection: %w", dctx.Err())
	}
	if a.err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("B: %w", a.err)
	}
	return c, a.c, nil
}
