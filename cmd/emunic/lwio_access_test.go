package main

import (
	"bytes"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

func TestLWIOKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		file []byte
		want []byte
	}{
		{"text with a newline", []byte("hunter2\n"), []byte("hunter2")},
		{"only one newline goes", []byte("hunter2\n\n"), []byte("hunter2\n")},
		{"binary, kept whole", []byte{0, 0xFF, '\r', 0x10}, []byte{0, 0xFF, '\r', 0x10}},
	} {
		got, err := readKeyFile(write(tc.name, tc.file))
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{write("empty", nil), write("newline only", []byte("\n")), filepath.Join(dir, "missing"), dir} {
		if _, err := readKeyFile(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	key := write("k", []byte("s3cret\n"))
	cfg, err := parseLWIOFlags("serve", []string{"--tap", "t0", "--addr", "10.9.1.1/24", "--export", dir, "--key-file", key,
		"--read-only", "--allow", "10.9.1.0/24", "--allow", "192.0.2.7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.9.1.0/24"), netip.MustParsePrefix("192.0.2.7/32")}
	if string(cfg.Secret) != "s3cret" || !cfg.ReadOnly || len(cfg.Allow) != 2 || cfg.Allow[0] != want[0] || cfg.Allow[1] != want[1] {
		t.Errorf("serve flags: %+v", cfg)
	}
	for _, sub := range []string{"put", "get", "stat"} {
		args := []string{"--tap", "t1", "--addr", "10.9.1.2/24", "--server", "10.9.1.1", "--key-file", key, "a"}
		if sub != "stat" {
			args = append(args, "b")
		}
		cfg, err := parseLWIOFlags(sub, args, io.Discard)
		if err != nil || string(cfg.Secret) != "s3cret" {
			t.Errorf("%s --key-file: %q, %v", sub, cfg.Secret, err)
		}
	}
	if _, err := parseLWIOFlags("serve", []string{"--tap", "t0", "--addr", "10.9.1.1/24", "--export", dir, "--allow", "nonsense"}, io.Discard); err == nil {
		t.Error("--allow nonsense: no error")
	}
}
