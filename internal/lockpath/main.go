// Command lockpath lists the functions, files and packages of this module
// that one uncontended Manager.Lock runs, Single over go-redis with the
// default options, from the coverage counters of that one call (the
// Manager took and released the key three times before, so scripts are
// cached and connections open). It is the measure of issue 52's "files and
// packages on the path of a lock". Run, with a redis-server listening on
// ADDR:
//
//	go build -cover -covermode=atomic -coverpkg=github.com/dlmgo/dlm/... -o /tmp/lockpath ./internal/lockpath
//	mkdir -p /tmp/lockpath.d /tmp/lockpath.exit && GOCOVERDIR=/tmp/lockpath.exit /tmp/lockpath ADDR /tmp/lockpath.d
//	go tool covdata func -i /tmp/lockpath.d | awk '$NF != "0.0%"'
//
// The last command prints each function the call ran; the files and the
// packages are the distinct paths and directories of that list, this
// command's own file left out.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/coverage"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: lockpath ADDR DIR (build it with -cover: see the package documentation)")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "lockpath:", err)
		os.Exit(1)
	}
}

func run(addr, dir string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := strategy.NewSingle(goredis.New(c))
	if err != nil {
		return err
	}
	m, err := dlm.New(s)
	if err != nil {
		return err
	}
	ctx := context.Background()
	for range 3 {
		l, err := m.Lock(ctx, "lockpath")
		if err != nil {
			return err
		}
		if err := l.Unlock(ctx); err != nil {
			return err
		}
	}
	if err := coverage.ClearCounters(); err != nil {
		return err
	}
	l, err := m.Lock(ctx, "lockpath")
	if err != nil {
		return err
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		return err
	}
	if err := coverage.WriteMetaDir(dir); err != nil {
		return err
	}
	return l.Unlock(ctx)
}
