// Command dlm works with dlm locks from the shell.
//
//	dlm demo [flags]              run concurrent workers against one lock and report
//	                              what shows it is safe (on embedded Redis by default)
//	dlm run --key K -- CMD ARGS   run a command while holding a lock (or a
//	                              semaphore's permit, a read or write hold)
//	dlm elect --name N -- CMD     run a command while leading an election
//	dlm doctor                    check a deployment for what makes locks unsafe or slow
//	dlm ls [PATTERN]              list held locks: owner, since, fence, TTL, waiters
//	dlm inspect KEY               show one lock, server by server
//	dlm revoke --reason WHY KEY   take a lock away from its holder
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"
)

const usage = `usage: dlm <command> [flags]

commands:
  demo    run concurrent workers through one lock and report whether it held
          (embedded Redis unless --addr, --url, --config or DLM_URL is given)
  run     run a command while holding a lock: dlm run --key K -- CMD ARGS
          (--permits N: a semaphore's permit; --readers N [--shared]: the
          write or a read side of a read-write lock)
  elect   run a command while leading an election: dlm elect --name N -- CMD
  doctor  check a Redis deployment for what makes locks unsafe or slow
  ls      list held locks matching a pattern: owner, since, fence, TTL, waiters
  inspect show who holds one lock, since when, its renewals, what each server holds
  revoke  take a lock away from its holder: dlm revoke --reason WHY KEY

Every command takes the deployment as --url URL, --config FILE (JSON) or
DLM_URL, one URL form per deployment:
  single://host:6379                      one server
  redlock://h1:6379,h2:6379,h3:6379       independent masters (Redlock)
  sentinel://s1:26379,s2:26379/mymaster   a primary found through Sentinel
  failover://primary:6379                 a primary given by its address
  cluster://n1:7000,n2:7001               a Redis Cluster, through any of its nodes
Run 'dlm <command> -h' for a command's flags and the URLs' options.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// go-redis logs redials and Sentinel lookups to stderr, which dlm run
	// shares with its command; dlm reports errors itself.
	redis.SetLogger(quietLogger{})
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case superviseArg:
		return supervise(args[2:]) // after "--"
	case watchArg:
		return watch()
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "elect":
		return electCmd(ctx, args[1:], stdout, stderr)
	case "doctor":
		return doctor(ctx, args[1:], stdout, stderr)
	case "ls":
		return lsCmd(ctx, args[1:], stdout, stderr)
	case "inspect":
		return inspectCmd(ctx, args[1:], stdout, stderr)
	case "revoke":
		return revokeCmd(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "dlm: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// parseExit is the exit code after a flag parsing error: 0 for -h, else 2.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
