#!/usr/bin/env bash
# Runs every check the project has, after installing what the tests need.
# Usage: ./test.sh [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-server >/dev/null || ! command -v redis-sentinel >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing redis-server and redis-sentinel from Debian's packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel >/dev/null
	else
		echo "test.sh: redis-server or redis-sentinel is missing and cannot be installed here;" \
			"tests that need them will skip (set DLM_REQUIRE_REDIS=1 to make that a failure)" >&2
	fi
fi

# The fault suite (faults/) puts servers and clients in network namespaces
# of their own: it needs ip (iproute2), nsenter (util-linux) and, for
# packet loss, nft (nftables).
if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null || ! command -v nft >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing iproute2, util-linux and nftables from Debian's packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 util-linux nftables >/dev/null
	fi
fi

# fencing/pgtest starts its own PostgreSQL server (initdb, postgres).
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v postgres >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing postgresql from Debian's packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	else
		echo "test.sh: postgresql is missing and cannot be installed here;" \
			"fencing/pgtest will skip (set DLM_REQUIRE_REDIS=1 to make that a failure)" >&2
	fi
fi

# Tests that move a server's clock build internal/redistest/clockshim with cc.
if ! command -v cc >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing gcc from Debian's packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
	fi
fi

# bench's -instructions counts a server's instructions under valgrind.
if ! command -v valgrind >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test.sh: installing valgrind from Debian's packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
	fi
fi

# ---- begin: server matrix and FIPS (issue 51) ----
# The server matrix (internal/redistest.Builds: Redis 7.0.15, Valkey 8.0.1,
# Redis 6.0.16) needs Valkey from bookworm-backports and Redis 6.0 unpacked
# from bullseye into a cache directory; .ci/servers.sh does both,
# idempotently (see it for how). TestServerMatrix (driver/goredis) and the
# pre-7.0 tests of strategy skip without them, or fail under
# DLM_REQUIRE_REDIS=1.
./.ci/servers.sh
# A program run with GODEBUG=fips140=only, where crypto/sha1 panics, takes
# locks: the README's Example (TestFIPS140Only adds a Redlock lock). Built
# with -race, as the root package's tests are below, so that the two share
# the compiled packages.
echo "test.sh: GODEBUG=fips140=only go test -run Example ." >&2
GODEBUG=fips140=only go test -race -count=1 -run 'Example' .
# ---- end: server matrix and FIPS (issue 51) ----

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "test.sh: gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
# Every module of the repository, as go.work lists them: the core, and the
# tools and integrations that are modules of their own so that their
# dependencies stay out of the core's go.mod (bench, cmd/dlm, dlmotel,
# faults, fencing/pgtest). `./...` at the root does not cross into a nested
# module, so each module is named by a pattern of its own (./cmd/dlm/...);
# in workspace mode one go command takes them all, and runs the packages of
# every module side by side.
export GOWORK="$PWD/go.work"
pkgs=$(go list -m -f '{{.Dir}}/...' | sed "s|^$PWD/|./|")
echo "test.sh: go vet" $pkgs >&2
go vet $pkgs

# --- release checks (issue 51) ---------------------------------------------
# staticcheck, at a pinned version, on every module. It is installed once
# into a temporary directory (through the module proxy, then from the module
# and build caches); its findings fail the run. The release rehearsal and
# the license check are Go tests of tools/release, run with the others.
staticcheck_version=v0.8.2 # staticcheck 2026.2.2, which supports Go 1.26
staticcheck_bin=$(mktemp -d)
echo "test.sh: installing staticcheck $staticcheck_version" >&2
GOBIN="$staticcheck_bin" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
echo "test.sh: staticcheck" $pkgs >&2
"$staticcheck_bin/staticcheck" $pkgs
rm -rf "$staticcheck_bin"
# --- end of release checks -------------------------------------------------

# The tests of every module but bench, with the race detector, in one go
# command: a module's slow packages run beside another's. -p 4 runs four
# test binaries at a time on 2 cores (the default is 2): most tests wait on
# servers, timers and child processes rather than burn CPU.
race_pkgs=$(echo "$pkgs" | grep -vx './bench/...')
echo "test.sh: go test -race" $race_pkgs >&2
go test -race -count=1 -p 4 -timeout 30m "$@" $race_pkgs
# bench: a smoke run of the comparison, without -race.
echo "test.sh: go test ./bench/..." >&2
go test -count=1 -timeout 5m ./bench/...
