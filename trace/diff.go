package trace

import (
	"bytes"
	"fmt"
	"io"
)

// Difference is where two traces first disagree.
type Difference struct {
	Index   int     // record index (in both files, counting from 0)
	A, B    *Record // nil: that trace ended first
	Why     string
	Context []Record // the records before it, from A
	StepA   *Record  // the step each record belongs to
	StepB   *Record
}

// DiffOptions relax a comparison.
type DiffOptions struct {
	IgnoreTime bool // step times may differ (two runs on the monotonic clock)
}

// Diff compares two traces record by record: same devices, same steps,
// same inputs and outputs in the same order. It returns nil when they
// agree.
func Diff(a, b io.Reader, opt DiffOptions) (*Difference, error) {
	ra, err := NewReader(a)
	if err != nil {
		return nil, fmt.Errorf("first trace: %w", err)
	}
	rb, err := NewReader(b)
	if err != nil {
		return nil, fmt.Errorf("second trace: %w", err)
	}
	var ctx []Record
	var stepA, stepB *Record
	for i := 0; ; i++ {
		x, errA := ra.Next()
		y, errB := rb.Next()
		if errA != nil && errA != io.EOF {
			return nil, fmt.Errorf("first trace: %w", errA)
		}
		if errB != nil && errB != io.EOF {
			return nil, fmt.Errorf("second trace: %w", errB)
		}
		if x == nil && y == nil {
			return nil, nil
		}
		d := &Difference{Index: i, Context: ctx, StepA: stepA, StepB: stepB}
		if x != nil {
			c := *x
			c.Data = bytes.Clone(x.Data)
			d.A = &c
		}
		if y != nil {
			c := *y
			c.Data = bytes.Clone(y.Data)
			d.B = &c
		}
		if x == nil || y == nil {
			d.Why = "one trace ends before the other"
			return d, nil
		}
		if why := sameRecord(x, y, opt); why != "" {
			d.Why = why
			return d, nil
		}
		if x.Kind == KindStep {
			stepA, stepB = d.A, d.B
			ctx = ctx[:0]
		}
		if len(ctx) == 4 {
			ctx = append(ctx[:0], ctx[1:]...)
		}
		ctx = append(ctx, *d.A)
	}
}

func sameRecord(x, y *Record, opt DiffOptions) string {
	if x.Dev != y.Dev {
		return fmt.Sprintf("device %d against device %d", x.Dev, y.Dev)
	}
	if x.Kind != y.Kind {
		return fmt.Sprintf("%v against %v", x.Kind, y.Kind)
	}
	if x.Kind == KindStep {
		if x.N != y.N || x.Flags != y.Flags || !opt.IgnoreTime && x.Now != y.Now {
			return "the steps differ"
		}
		return ""
	}
	if x.Kind.IsOutput() {
		return sameOutput(x, y)
	}
	if x.Ring != y.Ring || x.Off != y.Off || x.Val != y.Val || x.Addr != y.Addr || x.Flags != y.Flags {
		return fmt.Sprintf("%v differs in its fields", x.Kind)
	}
	if !bytes.Equal(x.Data, y.Data) {
		return fmt.Sprintf("%v differs in its bytes (first at offset %d)", x.Kind, firstDiff(x.Data, y.Data))
	}
	return ""
}
