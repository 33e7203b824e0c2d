// Command dlm works with dlm locks from the shell.
//
//	dlm demo [flags]              run concurrent workers against one lock and report
//	                              what shows it is safe (on embedded Redis by default)
//	dlm run --key K -- CMD ARGS   run a command while holding a lock
//	dlm doctor                    check a deployment for what makes locks unsafe or slow
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

const usage = `usage: dlm <command> [flags]

commands:
  demo    run concurrent workers through one lock and report whether it held
          (embedded Redis when no --addr is given)
  run     run a command while holding a lock: dlm run --key K -- CMD ARGS
  doctor  check a Redis deployment for what makes locks unsafe or slow

Run 'dlm <command> -h' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "doctor":
		return doctor(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "dlm: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
