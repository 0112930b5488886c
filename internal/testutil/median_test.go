package testutil

import (
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5}, // even: the mean of the two middle values
		{[]float64{10, 20}, 15},
	} {
		in := slices.Clone(c.v)
		if got := Median(c.v); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, c.want)
		}
		if !slices.Equal(in, c.v) {
			t.Errorf("Median reordered its argument: %v, was %v", c.v, in)
		}
	}
}
