package goredis

// Replies and errors: go-redis's values and errors in dlm's forms.

import (
	"errors"
	"fmt"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/nodekit"
)

var errNilReply = errors.New("dlm: script replied nil, want an integer or an array of integers")

// setReply sets c's Reply or Err from cmd's reply. A command whose reply
// was read keeps it when a later one failed: go-redis sets the error that
// cut a pipeline on every command without an error of its own, those whose
// replies it had read included. Its reader sets a command's value only
// once the command's whole reply was read, and a script replies with an
// integer or an array, so such a value is the command's own reply.
func (n *node) setReply(c *driver.Call, cmd *redis.Cmd) {
	v, err := cmd.Result()
	if err == nil {
		c.Reply, c.Err = nodekit.Ints(v)
		return
	}
	n.setFailed(c, v, err)
}

// setFailed is setReply's path for a command with an error.
func (n *node) setFailed(c *driver.Call, v any, err error) {
	var re redis.Error
	switch v.(type) {
	case []any, int64:
		if err != nil && !errors.As(err, &re) {
			err = nil
		}
	}
	switch {
	case err == redis.Nil: //nolint:errorlint // the reply itself, not a failover client's lookup that met one
		c.Err = errNilReply
	case err != nil:
		c.Err = replyErr(err, n.master)
	default:
		c.Reply, c.Err = nodekit.Ints(v)
	}
}

// replyErr returns err, an error of the client, in dlm's forms: a closed
// client matches dlm.ErrClosed, a failover client whose Sentinels all said
// they do not know its master matches driver.ErrUnknownMaster, and an error
// reply (one the connection's handshake met included) is a
// *driver.ReplyError.
func replyErr(err error, master string) error {
	var re redis.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	case errors.Is(err, redis.Nil):
		// go-redis's failover client: every Sentinel replied nil to
		// SENTINEL GET-MASTER-ADDR-BY-NAME, or some did and others could
		// not be reached (then the master may yet be found).
		name := "of the failover client"
		if master != "" {
			name = fmt.Sprintf("%q", master)
		}
		if allNil(err) {
			return fmt.Errorf("%w %s (every Sentinel asked said so): %w", driver.ErrUnknownMaster, name, err)
		}
		return fmt.Errorf("dlm: goredis: no Sentinel reached knows the master name %s: %w", name, err)
	case errors.As(err, &re):
		return nodekit.Reply(re.Error(), err)
	}
	return err
}

// allNil reports whether every error that err joins (through wrapping) is
// redis.Nil.
func allNil(err error) bool {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if !allNil(e) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return allNil(u.Unwrap())
	}
	return err == redis.Nil //nolint:errorlint // a leaf
}
