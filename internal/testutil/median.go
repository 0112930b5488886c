package testutil

import "slices"

// Median is the middle value of v, or the mean of the two middle values
// when len(v) is even; 0 for none. v is left as it was (Median sorts a
// copy), so a caller may go on to report the rounds in order.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
