package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/internal/redistest"
)

// -scale runs dlm and redsync holding a few locks, then a few more,
// through renewals, and writes every figure; none is lost.
func TestScale(t *testing.T) {
	redistest.Binary(t, "redis-server")
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := mainErr([]string{"-scale", "100,200", "-scale-redsync", "200", "-scale-ttl", "600ms", "-scale-hold", "700ms",
		"-scale-goroutines", "16", "-scale-probe", "100", "-scale-probes", "2", "-out", dir}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	var rep ScaleReport
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Config.TTL != 600*time.Millisecond || len(rep.Rows) != 3 {
		t.Fatalf("config %+v, %d rows", rep.Config, len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Err != "" || r.Lost != 0 || r.NotTaken != 0 || r.ReleaseFailed != 0 {
			t.Errorf("%s: error %q, lost %d, not taken %d, release failed %d", r.Lib, r.Err, r.Lost, r.NotTaken, r.ReleaseFailed)
		}
		if r.Fill <= 0 || len(r.Take) != 2 || r.Take[0] <= 0 || len(r.Release) != 2 || r.RenewalsPerLockS <= 0 || r.ServerBytesPerLock <= 0 {
			t.Errorf("%s: figures missing: %+v", r.Lib, r)
		}
	}
	if rep.Drain["dlm"] <= 0 || rep.Drain["redsync"] <= 0 {
		t.Errorf("no rate of releasing them all: %v", rep.Drain)
	}
	if !strings.Contains(stdout.String(), "| dlm | 100 |") || !strings.Contains(stdout.String(), "| dlm | 200 |") || !strings.Contains(stdout.String(), "| redsync | 200 |") {
		t.Errorf("table lacks a row:\n%s", stdout.String())
	}
}
