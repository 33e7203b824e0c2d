package dlm

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"sync"
)

// A Script is a Lua script that replies with an array of integers. Its SHA1
// digest is computed once, on first use.
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
		sum := sha1.Sum([]byte(s.src))
		s.sha = hex.EncodeToString(sum[:])
	})
	return s.sha
}

// Run runs the script on n with EVALSHA and, when the server does not have it
// cached, once more with EVAL.
func (s *Script) Run(ctx context.Context, n Node, keys []string, args ...string) ([]int64, error) {
	r, err := n.EvalSHA(ctx, s.SHA1(), keys, args...)
	if err != nil && errors.Is(err, ErrNoScript) {
		return n.Eval(ctx, s.src, keys, args...)
	}
	return r, err
}
