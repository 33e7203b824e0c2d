package main

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// A stuck job found and freed from the shell, on each kind of deployment:
// dlm ls and dlm inspect name the dlm run process that holds the lock and
// count the one waiting; dlm revoke ends the holder's run ("revoked") and
// the waiter goes ahead with a larger fence.
func TestStuckJobFromTheShell(t *testing.T) {
	t.Parallel()
	for _, d := range []struct {
		name  string
		url   func(t *testing.T) string
		nodes int
	}{
		{"single", func(t *testing.T) string { return "single://" + redistest.Start(t).Addr }, 1},
		{"redlock", func(t *testing.T) string {
			var addrs []string
			for _, s := range redistest.StartN(t, 3) {
				addrs = append(addrs, s.Addr)
			}
			return "redlock://" + strings.Join(addrs, ",") + "?timeout=2s"
		}, 3},
		{"sentinel", func(t *testing.T) string {
			topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1})
			return "sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + topo.Master + "?ack=all&replicas=1&wait_timeout=1s"
		}, 1},
	} {
		t.Run(d.name, func(t *testing.T) {
			url := d.url(t) + "&ttl=2s"
			if !strings.Contains(url, "?") {
				url = strings.Replace(url, "&ttl", "?ttl", 1)
			}
			holder := startDLM(t, "run", "--url", url, "--key", "nightly-backup", "--", "sleep", "60")
			owner := "dlm run sleep@"
			var out string
			require.Eventually(t, func() bool {
				_, out = runDLM(t, "ls", "--url", url, "nightly-*")
				return strings.Contains(out, "nightly-backup")
			}, 10*time.Second, 50*time.Millisecond, "dlm ls never listed the lock: %s", out)
			assert.Contains(t, out, owner)
			assert.Contains(t, out, ":"+strconv.Itoa(holder.cmd.Process.Pid), "the owner names the holder's pid")
			code, out := runDLM(t, "ls", "--url", url, "other-*")
			assert.Equal(t, 0, code, out)
			assert.NotContains(t, out, "nightly-backup", "the pattern filters")

			waiter := startDLM(t, "run", "--url", url, "--key", "nightly-backup", "--wait", "30s", "--", "sh", "-c", `echo "waiter fence=$DLM_FENCE"`)
			var info infoJSON
			require.Eventually(t, func() bool {
				code, out := runDLM(t, "inspect", "--json", "--url", url, "nightly-backup")
				require.Equal(t, 0, code, out)
				require.NoError(t, json.Unmarshal([]byte(out), &info), out)
				return info.Waiters > 0
				// As long as the waiter may wait (--wait 30s): under load a
				// waiter took over 10s to start and register.
			}, 30*time.Second, 50*time.Millisecond, "dlm inspect never counted the waiter")
			assert.True(t, info.Held)
			assert.True(t, strings.HasPrefix(info.Owner, owner), info.Owner)
			assert.Equal(t, int64(2000), info.LeaseMillis)
			assert.Equal(t, uint64(1), info.Fence)
			assert.Len(t, info.Nodes, d.nodes)
			code, out = runDLM(t, "inspect", "--url", url, "nightly-backup")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "held:      yes, by "+owner)
			assert.Contains(t, out, "waiting:   1 processes")
			if d.nodes > 1 {
				assert.Contains(t, out, "quorum:    3 of 3 nodes hold it for one token (majority 2)")
			}

			code, out = runDLM(t, "revoke", "--url", url, "--by", "ops", "--reason", "stuck since Tuesday", "nightly-backup")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "revoked by ops: stuck since Tuesday", "logged on stderr")
			var exit *exec.ExitError
			if assert.ErrorAs(t, holder.wait(t, 10*time.Second), &exit, "the revoked holder's dlm run stops its command and fails") {
				assert.Equal(t, 76, exit.ExitCode(), "the exit status of a lost lock")
			}
			assert.Contains(t, holder.out.String(), "revoked")
			assert.NoError(t, waiter.wait(t, 10*time.Second), "the waiter gets the lock")
			assert.Regexp(t, `waiter fence=[3-9]`, waiter.out.String(), "the revocation advanced the fence")

			code, out = runDLM(t, "inspect", "--url", url, "nightly-backup")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "held:      no")
			assert.Regexp(t, `revoked on .+: dlm run sleep@\S+'s lock, .* ago, by ops: stuck since Tuesday`, out)
			code, out = runDLM(t, "revoke", "--url", url, "--reason", "again", "nightly-backup")
			assert.Equal(t, 1, code, "nothing left to revoke: %s", out)
		})
	}
}

func TestOperatorUsage(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--url", url}, "one KEY"},
		{[]string{"revoke", "--url", url, "k"}, "--reason"},
		{[]string{"ls", "--url", url, "a", "b"}, "at most one PATTERN"},
		{[]string{"ls", "--url", url, "[a"}, "'[' without ']'"},
		{[]string{"inspect", "--url", url, ""}, "empty key"},
		{[]string{"revoke", "--url", url, "--reason", strings.Repeat("x", 300), "k"}, "at most 256 bytes"},
	} {
		code, out := runDLM(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s", c.args, out)
		assert.Contains(t, out, c.want, c.args)
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		glob, key string
		match     bool
	}{
		{"*", "anything", true},
		{"job-?", "job-1", true},
		{"job-?", "job-12", false},
		{"job-[12]", "job-2", true},
		{"job-[^12]", "job-2", false},
		{"a.b", "axb", false},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
	} {
		re, err := globRegexp(c.glob)
		require.NoError(t, err)
		assert.Equal(t, c.match, re.MatchString(c.key), "%q ~ %q", c.glob, c.key)
	}
}
