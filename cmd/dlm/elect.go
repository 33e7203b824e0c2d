package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/election"
)

const electUsage = `usage: dlm elect --name NAME [flags] -- COMMAND [ARGS...]

Campaigns in the election NAME until this process leads (up to --wait when
given; --wait 0: one attempt), runs COMMAND while it leads, and resigns
when COMMAND exits, so that another campaigner takes over at once.
Leadership is renewed, and rides through a failover, as dlm run's lock does
(TTL 30s, renewed every second); COMMAND is stopped before another leader
can be elected, as dlm run stops it (see dlm run -h: --on-lost, --grace,
--max-hold, exit status).
COMMAND's environment gets:
  DLM_ELECTION  the election's name
  DLM_TERM      the leader's term, larger than every earlier leader's: pass
                it with each write, so storage can refuse a deposed leader's
  DLM_VALUE     the value this leader announced (--value)

Elections need a deployment of one primary (single://, sentinel://,
failover://, cluster://), not redlock://.
`

func electCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm elect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, electUsage+targetUsage(defaultURL)+"\nflags:\n"); fs.PrintDefaults() }
	tf := addTargetFlags(fs, defaultURL)
	name := fs.String("name", "", "the election's name (required)")
	host, _ := os.Hostname()
	value := fs.String("value", host+":"+strconv.Itoa(os.Getpid()), "what this leader announces to observers (at most 256 bytes)")
	ttl := fs.Duration("ttl", 0, "leadership TTL; renewed every second, or every TTL/3 below 3s; how long a dead leader keeps others waiting (default: the config's ttl, else 30s)")
	wait := fs.Duration("wait", 0, "how long to campaign (default: until elected); 0 makes one attempt, bounded as dlm run's (see dlm run -h)")
	onLost := fs.String("on-lost", "term", "what to do with COMMAND when leadership is lost: term, kill or ignore")
	grace := fs.Duration("grace", defaultGrace, "time between SIGTERM and SIGKILL when leadership is lost")
	maxHold := fs.Duration("max-hold", 0, "stop renewing after this long (default: the config's max_hold, else no bound)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "wait" })
	if !given {
		*wait = untilElected
	}
	if *name == "" {
		fmt.Fprintln(stderr, "dlm elect: --name is required")
		return 2
	}
	o := holdOptions{name: "dlm elect", what: "leadership of " + strconv.Quote(*name), onLost: *onLost, wait: *wait, ttl: *ttl, grace: *grace, maxHold: *maxHold}
	return runWhileHeld(ctx, tf, o, fs.Args(), stdout, stderr, func(ctx context.Context, m *dlm.Manager) (held, error) {
		e, err := election.New(m, *name)
		if err != nil {
			return nil, err
		}
		campaign := e.Campaign
		if *wait == 0 {
			campaign = e.TryCampaign
		}
		l, err := campaign(ctx, *value)
		if err != nil {
			return nil, err
		}
		return leadership{l}, nil
	}, func(h held) []string {
		return []string{"DLM_ELECTION=" + *name, "DLM_TERM=" + strconv.FormatUint(h.Fence(), 10), "DLM_VALUE=" + *value}
	})
}

// untilElected is dlm elect's wait when --wait is not given.
const untilElected = 100 * 365 * 24 * time.Hour

// leadership is an election.Leadership seen as a held.
type leadership struct{ *election.Leadership }

func (l leadership) Until() time.Time                 { return l.Lock().Until() }
func (l leadership) Fence() uint64                    { return l.Term() }
func (l leadership) Unlock(ctx context.Context) error { return l.Resign(ctx) }
