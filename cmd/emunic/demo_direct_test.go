package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemoDirect: --path direct runs the sockets-direct path, on RDMA, and
// the data arrives intact; --path all runs the three.
func TestDemoDirect(t *testing.T) {
	for _, path := range []string{"direct", "all"} {
		cfg, err := parseDemoFlags([]string{"--path", path, "--bytes", "4MiB"}, new(bytes.Buffer))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := runDemo(context.Background(), cfg, &out); err != nil {
			t.Fatalf("--path %s: %v\n%s", path, err, out.String())
		}
		s := out.String()
		if !strings.Contains(s, "sockets direct, RDMA") || !strings.Contains(s, "arrived intact") {
			t.Fatalf("--path %s:\n%s", path, s)
		}
		if path == "all" && !(strings.Contains(s, "netstack, legacy rings") && strings.Contains(s, "delegated, offload engine")) {
			t.Fatalf("--path all misses a path:\n%s", s)
		}
	}
}
