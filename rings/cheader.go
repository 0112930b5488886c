package rings

// The C header of this ABI, c/emunic_abi.h, is generated from the constants
// in this package and the layout tables of docs/rings.md and
// docs/abi-blocks.md (which TestDocMatchesCode and TestDocABIBlocks hold to
// the code); TestCHeaderFresh fails when the committed header is stale.
//go:generate go run ../internal/abidoc/cheader
