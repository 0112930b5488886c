package split

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/regs"
	"github.com/emunic/emunic/rings"
)

// The device behind the register block: CONFIG says what device it is
// (its straps: nic.Config) and brings its port; an enable (CtrlEnable
// through REG_WRITE) builds it on the rings the registers place and starts
// it; a disable or reset stops it, and the next enable builds it afresh.

func (ss *session) config(body []byte, pf *os.File) Reply {
	var cfg nic.Config
	if err := json.Unmarshal(body, &cfg); err != nil {
		if pf != nil {
			pf.Close()
		}
		return ss.refuse(StatusBadConfig, "configuration: %v", err)
	}
	if cfg.IdleYield == 0 {
		cfg.IdleYield = DefaultIdleYieldMicros * time.Microsecond
	}
	var p port.Port
	var keep *os.File
	switch {
	case ss.link != nil:
		if pf != nil {
			pf.Close()
			return ss.refuse(StatusBadConfig, "a port with CONFIG after LINK: one or the other")
		}
		p, ss.link, ss.linked = ss.link, nil, true
	case pf != nil:
		var err error
		p, err = socketPort(pf)
		if err != nil {
			pf.Close()
			return ss.refuse(StatusBadConfig, "port: %v", err)
		}
		keep = pf // for the port of a later enable
	default:
		if ss.s.cfg.OpenPort == nil {
			return ss.refuse(StatusBadConfig, "no port: send one with CONFIG (FeaturePortFD)")
		}
		var err error
		if p, err = ss.s.cfg.OpenPort(); err != nil {
			return ss.refuse(StatusBadConfig, "port: %v", err)
		}
	}
	// nic.New checks the configuration and fills in its defaults without
	// touching the port: the device that runs is built at enable.
	dev, err := nic.New(cfg, ss.arena, p)
	if err != nil {
		p.Close()
		if keep != nil {
			keep.Close()
		}
		return ss.refuse(StatusBadConfig, "%v", err)
	}
	ss.cfg, ss.port, ss.portFD, ss.configured = cfg, p, keep, true
	ss.s.regs.SetIdent(regs.Ident{MAC: dev.MAC(), MTU: dev.MTU()})
	return Reply{Value: uint64(dev.MTU())}
}

// socketPort makes a port of a duplicate of the host's descriptor.
func socketPort(f *os.File) (port.Port, error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	sp, err := port.NewSocketPort(fd, "host-port")
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return sp, nil
}

// takePort is the port for the device an enable builds: CONFIG's for the
// first, then a fresh one on the same wire (the host's descriptor again,
// or the device's own port opened again). A shared-memory link is one
// device's: after a disable the session needs RESET and LINK again.
func (ss *session) takePort() (port.Port, error) {
	if p := ss.port; p != nil {
		ss.port = nil
		return p, nil
	}
	switch {
	case ss.portFD != nil:
		return socketPort(ss.portFD)
	case ss.linked:
		return nil, errors.New("the shared-memory link went with the last device: RESET, then LINK and CONFIG again")
	}
	return ss.s.cfg.OpenPort()
}

// register answers REG_READ and REG_WRITE.
func (ss *session) register(t MsgType, body []byte) Reply {
	off, v, err := DecodeReg(t, body)
	if err != nil {
		return ss.refuse(StatusBadMessage, "%v", err)
	}
	var e rings.Bar0ErrCode
	if t == MsgRegRead {
		v, e = ss.s.regs.Read32(off)
	} else {
		e = ss.s.regs.Write32(off, v)
	}
	if e == rings.ErrNone {
		return Reply{Value: uint64(v)}
	}
	ss.s.badReg.Add(1)
	msg := fmt.Sprintf("%v of register %#x refused: %v", t, off, e)
	if se := ss.s.regs.StartErr(); e == rings.ErrEnableFailed && se != nil {
		msg += ": " + se.Error()
	}
	ss.s.logf("%s", msg)
	if t == MsgRegPost {
		return Reply{Status: StatusBadRegister, Value: RegPostRefusal(e, off, v), Msg: msg}
	}
	return Reply{Status: StatusBadRegister, Value: uint64(e), Msg: msg}
}

// attachVectors gives the register block the session's interrupt delivery
// and binds the doorbell eventfd to the doorbell registers (the device
// looks at every ring on any of them: one eventfd stands for all, as an
// ioeventfd would).
func (ss *session) attachVectors() {
	var out [rings.Bar0Vectors]rings.Doorbell
	if ss.mode == VectorEventFD {
		if ss.words != nil {
			for i, e := range ss.efds {
				e.UseWord(KickWord(ss.words, i), &ss.s.badWords)
			}
		}
		out = [rings.Bar0Vectors]rings.Doorbell{ss.efds[1], ss.efds[2], ss.efds[3]}
		door := ss.s.regs.Doorbell(rings.Bar0RingCommand)
		bell := ss.efds[0]
		ss.wg.Add(1)
		go func() { defer ss.wg.Done(); bell.Forward(door) }()
	}
	ss.s.regs.AttachVectors(out)
}

// serverBackend is the register block's device: the session being served.
type serverBackend struct{ s *Server }

func (b serverBackend) Start(s regs.Setup) (rings.Doorbell, error) {
	if b.s.cur == nil {
		return nil, errors.New("no host attached")
	}
	return b.s.cur.startDevice(s)
}

func (b serverBackend) Stop() {
	if b.s.cur != nil {
		b.s.cur.stopDevice()
	}
}

// startDevice builds the device on what the registers say and starts it.
func (ss *session) startDevice(s regs.Setup) (rings.Doorbell, error) {
	if !ss.configured {
		return nil, errors.New("no CONFIG yet")
	}
	cfg := ss.cfg
	if s.ModUsecs != 0 {
		cfg.IntrDelay = time.Duration(s.ModUsecs) * time.Microsecond
	}
	if s.ModCount != 0 {
		cfg.IntrCount = int(s.ModCount)
	}
	p, err := ss.takePort()
	if err != nil {
		return nil, err
	}
	cfg.CounterArea, cfg.CounterAreaLen = s.CounterBase, int(s.CounterLen)
	cfg.Withheld = s.Withheld() // what the driver did not ask for is refused
	dev, err := nic.New(cfg, ss.arena, p)
	if err == nil {
		err = dev.Start(s.Rings, s.Vectors)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	door := dev.Doorbell()
	if ss.mode == VectorPoll {
		// Polling: the device looks at its rings every interval as if the
		// host had rung; the host polls its side the same way.
		ss.stopPoll = make(chan struct{})
		ss.pollWG.Add(1)
		poll, stop := ss.poll, ss.stopPoll
		go func() { defer ss.pollWG.Done(); PollEvery(poll, stop, door.Kick) }()
	}
	ss.dev = dev
	ss.s.started.Add(1)
	ss.s.mu.Lock()
	ss.s.dev = dev
	ss.s.mu.Unlock()
	ss.s.logf("device started: MAC %x, MTU %d, %d bytes of host memory", cfg.MAC, dev.MTU(), len(ss.mem))
	return door, nil
}

// stopDevice stops the running device; its port closes with it.
func (ss *session) stopDevice() {
	if ss.stopPoll != nil {
		close(ss.stopPoll)
		ss.pollWG.Wait()
		ss.stopPoll = nil
	}
	if ss.dev != nil {
		ss.dev.Stop()
		ss.dev = nil
	}
	ss.s.mu.Lock()
	ss.s.dev = nil
	ss.s.mu.Unlock()
}

// teardown resets the device (through its register block, counting a
// host gone when it was running and the host vanished) and releases
// everything of the session.
func (ss *session) teardown(gone bool) {
	ss.s.regs.Detach(gone)
	if ss.port != nil {
		ss.port.Close()
		ss.port = nil
	}
	if ss.portFD != nil {
		ss.portFD.Close()
		ss.portFD = nil
	}
	if ss.link != nil {
		ss.link.Close()
		ss.link = nil
	}
	for _, e := range ss.efds {
		e.Close()
	}
	ss.wg.Wait()
	if ss.words != nil {
		if n := ss.s.badWords.Load() - ss.badWords0; n > 0 {
			ss.s.logf("the host's kick words held garbage %d times (counts over %d)", n, MaxPendingKicks)
		}
	}
	ss.efds, ss.words = nil, nil
	if ss.mem != nil {
		unix.Munmap(ss.mem)
		ss.mem, ss.arena = nil, nil
	}
	ss.cfg, ss.configured, ss.linked = nic.Config{}, false, false
}
