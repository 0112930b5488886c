package lwfuse_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// fioJob runs one fio job on file and returns its read and write IOPS and
// bytes per second.
func fioJob(b *testing.B, file string, args ...string) (riops, wiops, rbw, wbw float64) {
	b.Helper()
	cmd := exec.Command("fio", append([]string{"--name=j", "--filename=" + file, "--output-format=json",
		"--ioengine=psync", "--iodepth=1", "--numjobs=1", "--size=32M", "--runtime=3", "--time_based",
		"--end_fsync=1"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("fio %v: %v\n%s", args, err, out)
	}
	var r struct {
		Jobs []struct {
			Read, Write struct {
				IOPS    float64 `json:"iops"`
				BWBytes float64 `json:"bw_bytes"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Jobs) != 1 {
		b.Fatalf("fio's JSON: %v\n%s", err, out)
	}
	j := r.Jobs[0]
	return j.Read.IOPS, j.Write.IOPS, j.Read.BWBytes, j.Write.BWBytes
}

// BenchmarkMountFio runs the same fio jobs on a file of the mount and on
// a local file of the same file system as the export: 4 KiB random reads
// and writes, 1 MiB sequential writes and 1 MiB sequential reads, one job
// at depth 1 (psync), 3 s each. No bar: it shows what the mount costs
// against the local file system's page cache.
func BenchmarkMountFio(b *testing.B) {
	if _, err := exec.LookPath("fio"); err != nil {
		b.Skip("fio is not installed")
	}
	m := mountB(b)
	local := filepath.Join(b.TempDir(), "local.bin")
	remote := filepath.Join(m.mnt, "fio.bin")
	for range b.N {
		for _, job := range []struct {
			name string
			args []string
		}{
			{"randrw4k", []string{"--rw=randrw", "--bs=4k"}},
			{"write1m", []string{"--rw=write", "--bs=1M"}},
			{"read1m", []string{"--rw=read", "--bs=1M"}},
		} {
			lr, lw, lrb, lwb := fioJob(b, local, job.args...)
			mr, mw, mrb, mwb := fioJob(b, remote, job.args...)
			switch job.name {
			case "randrw4k":
				b.ReportMetric(mr+mw, "iops-mount/"+job.name)
				b.ReportMetric(lr+lw, "iops-local/"+job.name)
			default:
				b.ReportMetric((mrb+mwb)/1e6, "MB/s-mount/"+job.name)
				b.ReportMetric((lrb+lwb)/1e6, "MB/s-local/"+job.name)
			}
		}
	}
}
