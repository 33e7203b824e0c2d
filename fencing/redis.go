package fencing

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm"
)

//go:embed fenced.lua
var fencedSource string

var fencedScript = eval.NewScript(fencedSource)

// Redis writes data kept in Redis under a fence, over any driver.Node: each
// write is one script that compares the fence with the resource's record,
// refuses a smaller one (ErrStale, nothing written), and otherwise writes
// the data and records the fence.
//
// The record lives in the data key's hash slot, so the script's two keys
// are on one Cluster master: "dlm:fenced:{T}:<resource>", T a tag of that
// slot. There is one record per resource and slot written to; records are
// never deleted. Writes to keys of one slot are ordered by their fences;
// a resource whose data spans slots has a record in each.
//
// Replication is asynchronous: a failover to a replica that missed the
// last writes forgets their records along with the data.
type Redis struct {
	Node driver.Node
}

// Set sets key to value under fence (with an expiry when ttl > 0, at least
// 1ms), as SET key value [PX ms].
func (r Redis) Set(ctx context.Context, resource string, fence uint64, key, value string, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: fencing: negative ttl %v", dlm.ErrInvalid, ttl)
	}
	ms := int64(0)
	if ttl > 0 {
		ms = max(int64((ttl+time.Millisecond-1)/time.Millisecond), 1)
	}
	_, err := r.run(ctx, resource, fence, key, "set", value, strconv.FormatInt(ms, 10))
	return err
}

// Del deletes key under fence and reports whether it existed.
func (r Redis) Del(ctx context.Context, resource string, fence uint64, key string) (bool, error) {
	n, err := r.run(ctx, resource, fence, key, "del")
	return n > 0, err
}

// HSet sets the fields of the hash at key under fence, fieldValues being
// field, value, field, value…, as HSET; it returns the number of fields
// added.
func (r Redis) HSet(ctx context.Context, resource string, fence uint64, key string, fieldValues ...string) (int64, error) {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return 0, fmt.Errorf("%w: fencing: HSet needs field-value pairs, got %d strings", dlm.ErrInvalid, len(fieldValues))
	}
	return r.run(ctx, resource, fence, key, "hset", fieldValues...)
}

// Advance records fence for resource in the slot of the resource's name,
// writing no data: Redis as the Store of Middleware.
func (r Redis) Advance(ctx context.Context, resource string, fence uint64) error {
	_, err := r.run(ctx, resource, fence, "", "record")
	return err
}

// RecordKey returns the key of resource's fence record in the slot of key
// (of resource itself when key is empty).
func RecordKey(resource, key string) string {
	if key == "" {
		key = resource
	}
	return "dlm:fenced:{" + slotTag(eval.Slot(key)) + "}:" + resource
}

func (r Redis) run(ctx context.Context, resource string, fence uint64, key, op string, args ...string) (int64, error) {
	if r.Node == nil {
		return 0, fmt.Errorf("%w: fencing: Redis with a nil Node", dlm.ErrInvalid)
	}
	if err := check(resource, fence); err != nil {
		return 0, err
	}
	keys := []string{RecordKey(resource, key)}
	if op != "record" {
		if key == "" {
			return 0, fmt.Errorf("%w: fencing: empty key", dlm.ErrInvalid)
		}
		keys = append(keys, key)
	}
	f := strconv.FormatUint(fence, 10)
	reply, err := fencedScript.Run(ctx, r.Node, keys, append([]string{f, op}, args...)...)
	if err != nil {
		return 0, errs.Within(fmt.Sprintf("fencing: %s %.64q under fence %d", op, key, fence), err)
	}
	if len(reply) == 0 || reply[0] == 0 {
		return 0, fmt.Errorf("%w (resource %.64q, fence %d)", ErrStale, resource, fence)
	}
	if len(reply) != 2 {
		return 0, fmt.Errorf("dlm: fencing: unexpected script reply %v", reply)
	}
	return reply[1], nil
}

// slotTag returns a three-character tag over [0-9a-zA-Z] whose hash slot is
// slot (the first in that order: the names are part of the storage format).
func slotTag(slot int) string {
	return slotTags()[slot*3 : slot*3+3]
}

var slotTags = sync.OnceValue(func() string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var tags [16384][3]byte
	found := 0
	for _, a := range []byte(alphabet) {
		for _, b := range []byte(alphabet) {
			for _, c := range []byte(alphabet) {
				t := [3]byte{a, b, c}
				if s := eval.Slot(string(t[:])); tags[s][0] == 0 {
					tags[s] = t
					found++
				}
			}
		}
	}
	if found != len(tags) {
		panic("fencing: slot tags do not cover every slot")
	}
	var sb strings.Builder
	sb.Grow(len(tags) * 3)
	for _, t := range tags {
		sb.Write(t[:])
	}
	return sb.String()
})
