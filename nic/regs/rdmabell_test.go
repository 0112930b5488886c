package regs

import (
	"sync"
	"testing"

	"github.com/emunic/emunic/rings"
)

// fakeRDMA is a device's RDMA doorbells: QPs and CQs that exist, and the
// doorbells it took.
type fakeRDMA struct {
	mu   sync.Mutex
	qps  map[uint32]bool
	cqs  map[uint32]bool
	qpDB []uint32
	arms [][2]uint32
}

func (f *fakeRDMA) QPDoorbell(qpn uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.qps[qpn] {
		return false
	}
	f.qpDB = append(f.qpDB, qpn)
	return true
}

func (f *fakeRDMA) ArmCQ(cq, flags uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.cqs[cq] {
		return false
	}
	f.arms = append(f.arms, [2]uint32{cq, flags})
	return true
}

type rdmaBell struct {
	kickFunc
	*fakeRDMA
}

// enabledRDMA is a model enabled with feat, its device having QP 5 and
// CQ 3.
func enabledRDMA(t *testing.T, feat rings.Bar0Feature) (*Model, *fakeRDMA) {
	t.Helper()
	m, f, _ := attached(t, 0)
	f.rdma = &fakeRDMA{qps: map[uint32]bool{5: true}, cqs: map[uint32]bool{3: true}}
	mustW(t, m, rings.RegDrvFeatures, uint32(feat))
	placeRings(t, m, memBase)
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	return m, f.rdma
}

func TestRDMADoorbells(t *testing.T) {
	m, r := enabledRDMA(t, rings.FeatRDMA|rings.FeatQPDoorbell)
	if v := mustR(t, m, rings.RegDevFeatures); v&uint32(rings.FeatQPDoorbell) == 0 {
		t.Fatalf("DevFeatures %#x lacks FeatQPDoorbell", v)
	}
	mustW(t, m, rings.RegQPDoorbell, 5)
	mustW(t, m, rings.RegCQArm, rings.Bar0CQArm(3, rings.ArmSolicited|rings.ArmIfPending))
	mustW(t, m, rings.RegCQArm, rings.Bar0CQArm(3, 0))
	if len(r.qpDB) != 1 || r.qpDB[0] != 5 {
		t.Errorf("QP doorbells %v, want [5]", r.qpDB)
	}
	if want := [][2]uint32{{3, rings.ArmSolicited | rings.ArmIfPending}, {3, 0}}; len(r.arms) != 2 || r.arms[0] != want[0] || r.arms[1] != want[1] {
		t.Errorf("arms %v, want %v", r.arms, want)
	}
	// Write-only: they read 0, and the reads are not refusals.
	if v := mustR(t, m, rings.RegQPDoorbell); v != 0 {
		t.Errorf("RegQPDoorbell reads %#x", v)
	}
	if v := mustR(t, m, rings.RegCQArm); v != 0 {
		t.Errorf("RegCQArm reads %#x", v)
	}
	// A QP or CQ the device does not have; reserved bits.
	wantRefused(t, m, rings.RegQPDoorbell, 6, rings.ErrNoDoorbell)
	wantRefused(t, m, rings.RegCQArm, rings.Bar0CQArm(4, 0), rings.ErrNoDoorbell)
	wantRefused(t, m, rings.RegQPDoorbell, 5|1<<24, rings.ErrBadValue)
	wantRefused(t, m, rings.RegCQArm, 3|1<<18, rings.ErrBadValue)
	wantRefused(t, m, rings.RegCQArm, 3|1<<31, rings.ErrBadValue)
	// Nothing of a refusal reached the device.
	if len(r.qpDB) != 1 || len(r.arms) != 2 {
		t.Errorf("after refusals: QP doorbells %v, arms %v", r.qpDB, r.arms)
	}
	// Disabled: refused, and the device is not asked.
	mustW(t, m, rings.RegCtrl, 0)
	wantRefused(t, m, rings.RegQPDoorbell, 5, rings.ErrNoDoorbell)
	wantRefused(t, m, rings.RegCQArm, rings.Bar0CQArm(3, 0), rings.ErrNoDoorbell)
	if len(r.qpDB) != 1 || len(r.arms) != 2 {
		t.Errorf("while disabled: QP doorbells %v, arms %v", r.qpDB, r.arms)
	}
	// The device goes on serving after every refusal.
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	mustW(t, m, rings.RegQPDoorbell, 5)
	if len(r.qpDB) != 2 {
		t.Errorf("after re-enable: QP doorbells %v", r.qpDB)
	}
}

func TestRDMADoorbellsNeedFeature(t *testing.T) {
	// Enabled without FeatQPDoorbell: a doorbell is refused and never
	// reaches the device, even for a QP it has.
	m, r := enabledRDMA(t, rings.FeatRDMA)
	wantRefused(t, m, rings.RegQPDoorbell, 5, rings.ErrNoDoorbell)
	wantRefused(t, m, rings.RegCQArm, rings.Bar0CQArm(3, 0), rings.ErrNoDoorbell)
	if len(r.qpDB) != 0 || len(r.arms) != 0 {
		t.Errorf("QP doorbells %v, arms %v reached the device", r.qpDB, r.arms)
	}
	// FeatQPDoorbell without FeatRDMA is not a set a driver may use.
	m2, _, _ := attached(t, 0)
	wantRefused(t, m2, rings.RegDrvFeatures, uint32(rings.FeatQPDoorbell), rings.ErrBadValue)
	// A device whose doorbell lacks them refuses them with the feature
	// negotiated.
	m3, _, _ := attached(t, 0)
	mustW(t, m3, rings.RegDrvFeatures, uint32(rings.FeatRDMA|rings.FeatQPDoorbell))
	placeRings(t, m3, memBase)
	mustW(t, m3, rings.RegCtrl, uint32(rings.CtrlEnable))
	wantRefused(t, m3, rings.RegQPDoorbell, 5, rings.ErrNoDoorbell)
}

func TestRDMADoorbellsWithheld(t *testing.T) {
	m, _, _ := attached(t, 0)
	m.Withhold(rings.FeatQPDoorbell)
	if v := mustR(t, m, rings.RegDevFeatures); v != uint32(rings.Bar0Features&^rings.FeatQPDoorbell) {
		t.Errorf("DevFeatures %#x", v)
	}
	wantRefused(t, m, rings.RegDrvFeatures, uint32(rings.FeatRDMA|rings.FeatQPDoorbell), rings.ErrBadValue)
}
