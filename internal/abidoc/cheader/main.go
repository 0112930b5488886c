// Command cheader writes rings/c/emunic_abi.h, the C header of the ring
// ABI, from the rings package's constants and its byte-level docs. Run it
// with go generate in the rings package (its directory is the working
// directory there):
//
//	go generate ./rings
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/emunic/emunic/internal/abidoc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cheader:", err)
		os.Exit(1)
	}
}

func run() error {
	pkg, err := abidoc.Load(".")
	if err != nil {
		return err
	}
	h, err := abidoc.CHeader(pkg, abidoc.RingsHeader)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abidoc.RingsHeaderPath), 0o755); err != nil {
		return err
	}
	return os.WriteFile(abidoc.RingsHeaderPath, h, 0o644)
}
