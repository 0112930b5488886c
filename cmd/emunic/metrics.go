package main

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// Counters exported the way Go daemons export them: 'serve' and 'device'
// take --metrics ADDR and answer there with the Prometheus text format at
// /metrics and expvar's JSON at /debug/vars (the counters under "emunic",
// beside the runtime's "memstats" and "cmdline").

// metric is one counter of a scrape.
type metric struct {
	name   string // emunic_… without labels
	labels string // `ring="command"`, or ""
	help   string
	value  uint64
}

// newLogger is the commands' structured log on stderr (log/slog, text).
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// printfTo adapts a slog.Logger to the printf-style log functions of the
// services and the split server: one Info record per call, or a Warn when
// the message says it is a warning.
func printfTo(l *slog.Logger) func(format string, args ...any) {
	return func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if rest, ok := strings.CutPrefix(msg, "warning: "); ok {
			l.Warn(rest)
			return
		}
		l.Info(msg)
	}
}

// structMetrics turns a struct of counters into metrics named
// prefix_<field> (unsigned and signed integer fields; the rest skipped).
func structMetrics(prefix, labels, help string, v any) []metric {
	rv := reflect.ValueOf(v)
	var out []metric
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		var n uint64
		switch fv := rv.Field(i); fv.Kind() {
		case reflect.Uint64, reflect.Uint32, reflect.Uint, reflect.Uint16, reflect.Uint8:
			n = fv.Uint()
		case reflect.Int64, reflect.Int32, reflect.Int, reflect.Int16, reflect.Int8:
			if fv.Int() < 0 {
				continue
			}
			n = uint64(fv.Int())
		default:
			continue
		}
		out = append(out, metric{name: prefix + "_" + snakeCase(f.Name), labels: labels, help: help, value: n})
	}
	return out
}

// hostMetrics are an emulated host's counters: the device's, as the host
// reads them from the counter area it publishes (stat block, rings,
// engine), and the driver's.
func hostMetrics(h *tcpstack.Host) []metric {
	s := snapHost(h)
	var out []metric
	for id := rings.StatID(0); id < rings.NumStats; id++ {
		out = append(out, metric{name: "emunic_device_" + id.String() + "_total", help: "the device's stat block (docs/rings.md)", value: s.stat[id]})
	}
	for _, r := range []struct {
		name string
		st   rings.RingStats
	}{{"command", s.ring.Command}, {"notification", s.ring.Notify}, {"transmit", s.ring.Tx}, {"receive", s.ring.Rx}} {
		out = append(out, structMetrics("emunic_ring", fmt.Sprintf("ring=%q", r.name), "ring mechanics, the device's side", r.st)...)
	}
	out = append(out, structMetrics("emunic_engine", "", "the delegated TCP engine", s.eng)...)
	out = append(out, structMetrics("emunic_driver", "", "the host's NIC driver", s.drv)...)
	return out
}

// writePrometheus writes ms in the Prometheus text exposition format.
func writePrometheus(w io.Writer, ms []metric) {
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	last := ""
	for _, m := range ms {
		if m.name != last {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name)
			last = m.name
		}
		if m.labels != "" {
			fmt.Fprintf(w, "%s{%s} %d\n", m.name, m.labels, m.value)
		} else {
			fmt.Fprintf(w, "%s %d\n", m.name, m.value)
		}
	}
}

// metricsJSON is ms as expvar shows them: name (with labels) → value.
func metricsJSON(ms []metric) map[string]uint64 {
	out := make(map[string]uint64, len(ms))
	for _, m := range ms {
		k := m.name
		if m.labels != "" {
			k += "{" + m.labels + "}"
		}
		out[k] = m.value
	}
	return out
}

// The expvar variable is process-wide (expvar.Publish panics on a second
// one): it reads whichever collector the running command installed.
var (
	expvarOnce sync.Once
	collector  atomic.Pointer[func() []metric]
)

// metricsServer answers scrapes at addr until closed.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// startMetrics listens at addr (host:port; port 0 picks one) and serves
// the collector's metrics there.
func startMetrics(addr string, collect func() []metric, logger *slog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	collector.Store(&collect)
	expvarOnce.Do(func() {
		expvar.Publish("emunic", expvar.Func(func() any {
			if c := collector.Load(); c != nil {
				return metricsJSON((*c)())
			}
			return nil
		}))
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		writePrometheus(w, collect())
	})
	mux.Handle("/debug/vars", expvar.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "emunic: /metrics (Prometheus text), /debug/vars (expvar JSON)")
	})
	ms := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := ms.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics server stopped", "err", err)
		}
	}()
	logger.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics", "expvar", "http://"+ln.Addr().String()+"/debug/vars")
	return ms, nil
}

// Addr is where the server listens.
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops the server.
func (m *metricsServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.srv.Shutdown(ctx)
	collector.Store(nil)
}
