//go:build race

package rings

// warmEnabled is false under the race detector: warm's store to a free
// slot's unused top byte races by design with a command ring host that
// still polls the previous lap's DONE bits in the same word (an atomic
// load), which the detector cannot tell from a real race. Skipping the
// warm-up changes only speed.
const warmEnabled = false
