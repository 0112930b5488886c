package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// scrape fetches url and parses the Prometheus text: every sample, and
// the names that have HELP and TYPE lines.
func scrape(t *testing.T, url string) (samples map[string]uint64, typed map[string]bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	samples, typed = map[string]uint64{}, map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "counter" {
				t.Errorf("bad TYPE line %q", line)
			}
			typed[f[0]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseUint(line[i+1:], 10, 64)
		if i < 0 || err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		samples[line[:i]] = v
	}
	return samples, typed
}

// TestMetricsEndpoint serves a host's counters after a transfer and checks
// them against independent counts: the frames the wire carried to and from
// the host's port, and the driver's own count; /debug/vars says the same.
func TestMetricsEndpoint(t *testing.T) {
	cfg := defaultDemoConfig()
	cfg.Bytes = 256 << 10
	lab, err := newDemoLab(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	if _, err := netstackTransfer(context.Background(), lab, cfg); err != nil {
		t.Fatal(err)
	}
	snap := lab.snapshot() // waits until the units have published what they did
	ms, err := startMetrics("127.0.0.1:0", func() []metric { return hostMetrics(lab.a) }, newLogger(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	samples, typed := scrape(t, "http://"+ms.Addr()+"/metrics")
	for name := range samples {
		base := name
		if i := strings.IndexByte(name, '{'); i >= 0 {
			base = name[:i]
		}
		if !typed[base] {
			t.Errorf("%s has no TYPE line", base)
		}
	}
	wire := snap.wireAB // A's port: frames A sent, frames A received
	for name, want := range map[string]uint64{
		"emunic_device_tx_frames_total": wire.TxFrames,
		"emunic_device_rx_frames_total": snap.wireBA.TxFrames - snap.wireBA.TxDropLoss,
		"emunic_driver_tx_frames":       snap.a.drv.TxFrames,
	} {
		got, ok := samples[name]
		if !ok || got != want || want == 0 {
			t.Errorf("%s = %d (present %v), independent count %d", name, got, ok, want)
		}
	}
	if samples[`emunic_ring_entries{ring="transmit"}`] == 0 {
		t.Errorf("no transmit ring entries: %v", samples)
	}

	resp, err := http.Get("http://" + ms.Addr() + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var vars struct {
		Emunic   map[string]uint64 `json:"emunic"`
		Memstats json.RawMessage   `json:"memstats"`
	}
	if err := json.Unmarshal(body, &vars); err != nil {
		t.Fatalf("/debug/vars: %v\n%.300s", err, body)
	}
	if vars.Emunic["emunic_device_tx_frames_total"] != wire.TxFrames || len(vars.Memstats) == 0 {
		t.Errorf("/debug/vars: tx frames %d, want %d; memstats %d bytes", vars.Emunic["emunic_device_tx_frames_total"], wire.TxFrames, len(vars.Memstats))
	}
	if !bytes.Contains(body, []byte(`"cmdline"`)) {
		t.Error("/debug/vars lacks expvar's own variables")
	}
}

func TestMetricsBadAddr(t *testing.T) {
	if _, err := startMetrics("300.1.1.1:99999", func() []metric { return nil }, newLogger(io.Discard)); err == nil || !strings.Contains(err.Error(), "--metrics") {
		t.Errorf("bad address: %v", err)
	}
}
