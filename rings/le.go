package rings

import (
	"encoding/binary"
	"strconv"
)

// All ring entries and headers are little-endian, as PCIe devices' are.
var le = binary.LittleEndian

const hexDigits = "0123456789abcdef"

func hex16(v uint16) string {
	return string([]byte{hexDigits[v>>12], hexDigits[v>>8&15], hexDigits[v>>4&15], hexDigits[v&15]})
}

// ShortError is returned when a buffer is too short for the entry it should
// hold.
type ShortError struct {
	What      string
	Got, Want int
}

func (e *ShortError) Error() string {
	return "rings: " + e.What + " entry of " + strconv.Itoa(e.Got) + " bytes, want " + strconv.Itoa(e.Want)
}

func errShort(what string, got, want int) error { return &ShortError{What: what, Got: got, Want: want} }
