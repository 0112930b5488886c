// Package fuzzcorpus writes the checked-in seed corpora of fuzz targets
// from their encoders, the one way every package's tests do it.
//
//	go test -run TestWriteFuzzCorpus ./rings/ -update-corpus
//
// (the flag goes after the package path). It imports nothing of emunic, so
// any package's tests, rings included, can use it.
package fuzzcorpus

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update-corpus", false, "write the fuzz seed corpora in testdata/fuzz from the encoders")

// Updating skips the test unless -update-corpus was given: corpus writers
// rewrite checked-in files and must never run by default.
func Updating(t *testing.T) {
	t.Helper()
	if !*update {
		t.Skip("run with -update-corpus to rewrite the seed corpora")
	}
}

// Write writes each seed as a corpus file of fuzz target fuzz in
// testdata/fuzz/<fuzz>/seed-NN: one []byte argument, plus extra (the Go
// literals of the target's further arguments, such as "uint64(1)").
func Write(t *testing.T, fuzz string, seeds [][]byte, extra ...string) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", fuzz)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range seeds {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
		for _, e := range extra {
			body += e + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
