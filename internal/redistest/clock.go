package redistest

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

//go:embed clockshim/clock.c
var clockSource []byte

// A Clock is the wall clock of one redis-server, which the test shifts and
// scales: the server expires keys, and answers TIME, by it. The monotonic
// clock is left alone, as an NTP step or a fast oscillator leaves it.
type Clock struct {
	mu   sync.Mutex
	mem  []byte
	vals *[4]int64 // sequence, anchor, offset, rate (ppb): see clockshim/clock.c
	env  []string  // what a server needs in its environment to follow it
}

// StartClocked starts a redis-server as Start does, with a wall clock the
// test controls through the returned Clock; it begins at real time.
func StartClocked(t testing.TB, args ...string) (*Server, *Clock) {
	t.Helper()
	Binary(t, "cc") // skips (or fails, in CI) without a C compiler
	c, err := NewClock(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	s := &Server{bin: Binary(t, "redis-server"), dir: t.TempDir(), args: args, env: c.env}
	return launch(t, s), c
}

// NewClock makes a Clock, at real time, for servers that Launch starts with
// Config.Clock (a tool's, without a testing.TB): its setting lives in a file
// in dir, which every such server maps. It builds the shim with cc on first
// use. Close unmaps the file; the servers' clocks then stay as they were.
func NewClock(dir string) (*Clock, error) {
	lib, err := clockLib()
	if err != nil {
		return nil, fmt.Errorf("build the clock shim: %w", err)
	}
	f, err := os.CreateTemp(dir, "clock")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int(unsafe.Sizeof([4]int64{}))
	if err := f.Truncate(int64(size)); err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	c := &Clock{mem: mem, vals: (*[4]int64)(unsafe.Pointer(&mem[0])),
		env: []string{"LD_PRELOAD=" + lib, "DLM_CLOCK_FILE=" + f.Name()}}
	c.write(time.Now().UnixNano(), 0, 1e9)
	return c, nil
}

// Close unmaps the clock's file; call it after its servers stopped.
func (c *Clock) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return nil
	}
	err := syscall.Munmap(c.mem)
	c.mem, c.vals = nil, new([4]int64) // later calls act on nothing
	return err
}

// Jump moves the server's clock by d at once (forward when d > 0).
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.write(atomic.LoadInt64(&c.vals[1]), atomic.LoadInt64(&c.vals[2])+int64(d), atomic.LoadInt64(&c.vals[3]))
}

// SetRate makes the server's clock run rate times as fast as real time
// from now on (1.01 gains 10ms a second), without a jump.
func (c *Clock) SetRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	anchor, offset, old := atomic.LoadInt64(&c.vals[1]), atomic.LoadInt64(&c.vals[2]), atomic.LoadInt64(&c.vals[3])
	shown := anchor + int64(float64(now-anchor)*float64(old)/1e9) + offset
	c.write(now, shown-now, int64(rate*1e9))
}

// Offset reports how far the server's clock is ahead of real time now.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	anchor, offset, rate := atomic.LoadInt64(&c.vals[1]), atomic.LoadInt64(&c.vals[2]), atomic.LoadInt64(&c.vals[3])
	return time.Duration(anchor + int64(float64(now-anchor)*float64(rate)/1e9) + offset - now)
}

// write stores a setting under the seqlock the server's reader checks.
func (c *Clock) write(anchor, offset, rate int64) {
	atomic.AddInt64(&c.vals[0], 1) // odd: being written
	atomic.StoreInt64(&c.vals[1], anchor)
	atomic.StoreInt64(&c.vals[2], offset)
	atomic.StoreInt64(&c.vals[3], rate)
	atomic.AddInt64(&c.vals[0], 1)
}

var clockBuild struct {
	once sync.Once
	path string
	err  error
}

// clockLib builds clockshim/clock.c into a shared library once per process,
// in a directory of the user's cache named for its source's hash.
func clockLib() (string, error) {
	clockBuild.once.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			clockBuild.err = err
			return
		}
		sum := sha256.Sum256(clockSource)
		// A cache, kept between runs as Go keeps its build cache (not in
		// the temporary directory, which tests must leave as they found it).
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "dlm-clock-"+hex.EncodeToString(sum[:8]))
		clockBuild.path = filepath.Join(dir, "libdlmclock.so")
		if _, err := os.Stat(clockBuild.path); err == nil {
			return
		}
		if clockBuild.err = os.MkdirAll(dir, 0o755); clockBuild.err != nil {
			return
		}
		src := filepath.Join(dir, "clock.c")
		if clockBuild.err = os.WriteFile(src, clockSource, 0o644); clockBuild.err != nil {
			return
		}
		tmp, err := os.CreateTemp(dir, "lib*.so")
		if err != nil {
			clockBuild.err = err
			return
		}
		tmp.Close()
		out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", tmp.Name(), src).CombinedOutput()
		if err != nil {
			clockBuild.err = &buildError{err: err, out: string(out)}
			return
		}
		clockBuild.err = os.Rename(tmp.Name(), clockBuild.path) // atomic: other test binaries may build it too
	})
	return clockBuild.path, clockBuild.err
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }
