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
//	dlm version                   print the module version and VCS revision
//	dlm help [COMMAND]            print the help of dlm or of a command
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

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
  version print dlm's module version and VCS revision
  help    print this help, or a command's: dlm help run

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
	sigs := stopSignals
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		sigs = []os.Signal{os.Interrupt} // the supervisor handles the others itself
	}
	ctx, stop := notifyContext(context.Background(), sigs...)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// stopSignals end a command's wait: SIGINT, SIGTERM and SIGHUP cancel the
// context of main, its cause an interruption that names the signal. While
// dlm run or dlm elect holds its lock they are forwarded to COMMAND's
// group instead (see runUsage).
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// An interruption is the cause of main's context when a stop signal came.
type interruption struct{ sig syscall.Signal }

func (i interruption) Error() string { return "interrupted by " + signalName(i.sig) }

// notifyContext returns a context that the first of the signals cancels
// with an interruption as its cause.
func notifyContext(parent context.Context, stopSignals ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	go func() {
		select {
		case s := <-sigs:
			// A second signal takes its default action, unless a command
			// catches it itself (dlm run forwards it while COMMAND runs).
			signal.Stop(sigs)
			cancel(interruption{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel(context.Canceled) }
}

// interrupted returns the exit status after ctx was cancelled by a stop
// signal, 128+N for signal N as a shell reports it (130 for SIGINT, 143 for
// SIGTERM, 129 for SIGHUP), and how to name it; 130 when the cause is not
// a signal.
func interrupted(ctx context.Context) (int, string) {
	var i interruption
	if errors.As(context.Cause(ctx), &i) {
		return 128 + int(i.sig), signalName(i.sig)
	}
	return 130, "an interrupt"
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// commands are dlm's subcommands by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"demo": demo, "run": runCmd, "elect": electCmd, "doctor": doctor,
	"ls": lsCmd, "inspect": inspectCmd, "revoke": revokeCmd, "version": versionCmd,
}

// versionCmd prints the command's module and version, the version of the
// dlm library it was built with (its own module), and the VCS revision,
// as the Go toolchain recorded them.
func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: dlm version")
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			return 0
		}
		return 2
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(stdout, "dlm: no build information in this binary")
		return 0
	}
	fmt.Fprintf(stdout, "dlm %s\nmodule %s\n", bi.Main.Version, bi.Main.Path)
	for _, d := range bi.Deps {
		if d.Path == "github.com/dlmgo/dlm" {
			lib := d.Version
			if d.Replace != nil {
				lib += " => " + d.Replace.Path
				if d.Replace.Version != "" {
					lib += " " + d.Replace.Version
				}
			}
			fmt.Fprintf(stdout, "library %s %s\n", d.Path, lib)
		}
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	if rev == "" {
		rev = "unknown (built without VCS information)"
	}
	fmt.Fprintf(stdout, "revision %s%s", rev, modified)
	if at != "" {
		fmt.Fprintf(stdout, " of %s", at)
	}
	fmt.Fprintf(stdout, "\n%s\n", bi.GoVersion)
	return 0
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
	if cmd, ok := commands[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	switch args[0] {
	case superviseArg:
		return supervise(args[2:]) // after "--"
	case watchArg:
		return watch(args[1:])
	case "help":
		if len(args) > 1 {
			cmd, ok := commands[args[1]]
			if !ok {
				fmt.Fprintf(stderr, "dlm help: unknown command %s\n\n%s", quoteInput(args[1]), usage)
				return 2
			}
			return cmd(ctx, []string{"-h"}, stdout, stdout) // the help on stdout, as asked for
		}
		fmt.Fprint(stdout, usage)
		return 0
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "dlm: unknown command %s\n\n%s", quoteInput(args[0]), usage)
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
