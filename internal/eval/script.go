// Scripts by name, and where their keys live.

package eval

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/sha1"
)

// A Script is a Lua script that replies with an integer or an array of
// integers. Its SHA1 digest is computed once, on first use, without
// crypto/sha1 (which a program run with GODEBUG=fips140=only may not use:
// the digest is only the server's name for the cached script).
type Script struct {
	src  string
	once sync.Once
	sha  string
}

// NewScript returns a Script with the given Lua source.
func NewScript(src string) *Script { return &Script{src: src} }

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// SHA1 returns the hex SHA1 digest by which Redis caches the script.
func (s *Script) SHA1() string {
	s.once.Do(func() {
		s.sha = sha1.Hex(s.src)
	})
	return s.sha
}

// Run runs the script once on n with EVALSHA and, when the server does not
// have it cached, once more with EVAL.
func (s *Script) Run(ctx context.Context, n driver.Node, keys []string, args ...string) ([]int64, error) {
	// A Node keeps no reference to calls once Run returns, so the one-call
	// slice, which escapes through the interface, is reused: every lock
	// operation passes here (BenchmarkScriptRun).
	c := oneCall.Get().(*[1]driver.Call)
	c[0] = driver.Call{Keys: keys, Args: args}
	s.RunMany(ctx, n, c[:])
	r, err := c[0].Reply, c[0].Err
	c[0] = driver.Call{}
	oneCall.Put(c)
	return r, err
}

var oneCall = sync.Pool{New: func() any { return new([1]driver.Call) }}

// RunMany runs the script once per call on n, pipelined, and sets every
// call's Reply or Err (the calls' SHA1 and Source are set here). Calls that
// met NOSCRIPT run once more, all by EVAL in one more batch: on a Cluster
// every master caches scripts on its own, and loading the script with one
// call first would wait on one master for all (a stalled one included).
func (s *Script) RunMany(ctx context.Context, n driver.Node, calls []driver.Call) {
	for i := range calls {
		calls[i].SHA1, calls[i].Source, calls[i].Reply, calls[i].Err = s.SHA1(), "", nil, nil
	}
	n.Run(ctx, calls)
	retry := noScript(calls)
	if len(retry) == 0 {
		return
	}
	again := make([]driver.Call, len(retry))
	for j, i := range retry {
		again[j] = driver.Call{Source: s.src, Keys: calls[i].Keys, Args: calls[i].Args}
	}
	n.Run(ctx, again)
	for j, i := range retry {
		calls[i].Reply, calls[i].Err = again[j].Reply, again[j].Err
	}
}

// RunWait runs the script on n and then w's command on the same connection
// (see driver.Node.RunWait), with EVALSHA and, when the server does not have
// the script cached, once more with EVAL (the wait is then sent again).
func (s *Script) RunWait(ctx context.Context, n driver.Node, w driver.Wait, keys []string, args ...string) ([]int64, driver.Acks, error) {
	c := []driver.Call{{SHA1: s.SHA1(), Keys: keys, Args: args}}
	acks, err := n.RunWait(ctx, c, w)
	if c[0].Err != nil && errors.Is(c[0].Err, driver.ErrNoScript) {
		c[0] = driver.Call{Source: s.src, Keys: keys, Args: args}
		acks, err = n.RunWait(ctx, c, w)
	}
	if c[0].Err != nil {
		return nil, driver.Acks{}, c[0].Err
	}
	return c[0].Reply, acks, err
}

func noScript(calls []driver.Call) []int {
	var idx []int
	for i := range calls {
		if calls[i].Err != nil && errors.Is(calls[i].Err, driver.ErrNoScript) {
			idx = append(idx, i)
		}
	}
	return idx
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384. On a server that is not a
// Cluster it only groups keys.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[k]]
	}
	return int(crc) % 16384
}

// crcTable holds the CRC16 (XMODEM, polynomial 0x1021) of each byte: a
// key's CRC is then one lookup a byte, where the bit-by-bit loop took
// eight hard-to-predict branches (BenchmarkSlot, a 20-byte key: about
// 270ns, against 40ns by the table).
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()
