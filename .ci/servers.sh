#!/usr/bin/env bash
# Installs the servers of the server matrix (internal/redistest.Builds)
# beside the system's redis-server 7.0.15, idempotently:
#
#   Valkey 8.0.1   valkey-server from bookworm-backports, installed with apt
#                  (the suite is added to apt's sources in a file of its own;
#                  backports are never chosen unless asked for with -t).
#   Redis 6.0.16   from Debian 11 (bullseye), never installed system-wide:
#                  its packages are downloaded by an apt of their own (its
#                  sources, lists and cache in the cache directory; the
#                  system's apt never sees bullseye) and unpacked into
#                  $DLM_SERVERS_DIR/redis-6.0: redis-tools holds the server
#                  (redis-server is a link to redis-check-rdb, which acts by
#                  the name it is called by), and libssl1.1, liblua5.1-0,
#                  lua-cjson, lua-bitop and libhiredis0.14 the libraries it
#                  needs (lib/, for LD_LIBRARY_PATH).
#
# DLM_SERVERS_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/dlm-servers,
# where redistest looks too. Needs root and apt-get; without them it says
# what is missing and the matrix skips (or fails under DLM_REQUIRE_REDIS=1).
set -euo pipefail

dir=${DLM_SERVERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dlm-servers}
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
# Other processes may run apt at the same time: wait for its lock.
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"; }

# Valkey 8.0.1 (bookworm-backports).
if ! command -v valkey-server >/dev/null; then
	if can_apt; then
		echo "servers.sh: installing valkey-server from bookworm-backports" >&2
		if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
			cat >/etc/apt/sources.list.d/dlm-bookworm-backports.sources <<-'EOF'
				# Added by dlm's .ci/servers.sh for valkey-server (the server matrix).
				# Backports are pinned at 100 by their Release file: nothing is
				# installed from them unless asked for with -t bookworm-backports.
				Types: deb
				URIs: http://deb.debian.org/debian
				Suites: bookworm-backports
				Components: main
				Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
			EOF
		fi
		apt_get update -qq
		apt_get install -y -qq -t bookworm-backports valkey-server >/dev/null
	else
		echo "servers.sh: valkey-server is missing and cannot be installed here" >&2
	fi
fi

# Redis 6.0.16 (bullseye), unpacked into $dir/redis-6.0.
r60=$dir/redis-6.0
if ! LD_LIBRARY_PATH=$r60/lib "$r60/redis-server" --version 2>/dev/null | grep -q 'v=6\.0\.'; then
	if can_apt; then
		echo "servers.sh: unpacking Redis 6.0 from Debian 11 (bullseye) into $r60" >&2
		mkdir -p "$dir"
		apt=$dir/apt-bullseye
		mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d"
		: >"$apt/status"
		cat >"$apt/sources.list" <<-'EOF'
			deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
			deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
		EOF
		# An apt of its own: these sources, lists and cache, no preferences,
		# and an empty status (the system's installed versions, newer, would
		# be its candidates); it only downloads: dpkg never sees these
		# packages.
		private=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
			-o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$apt/sources.list.d"
			-o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt/cache"
			-o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
		apt-get "${private[@]}" update -qq
		# What the server needs from bookworm itself (redis-server 7.0
		# needs them too).
		if ! dpkg -s libjemalloc2 liblzf1 >/dev/null 2>&1; then
			apt_get install -y -qq libjemalloc2 liblzf1 >/dev/null
		fi
		tmp=$(mktemp -d "$dir/.redis-6.0.XXXXXX")
		(cd "$tmp" && apt-get "${private[@]}" download -qq \
			redis-tools libssl1.1 liblua5.1-0 lua-cjson lua-bitop libhiredis0.14)
		for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
		rm -f "$tmp"/*.deb
		# lib: the multiarch directory the libraries are in (x86_64-linux-gnu here).
		libssl=$(find "$tmp/root" -name 'libssl.so.1.1' | head -n 1)
		ln -s "$(dirname "${libssl#"$tmp/"}")" "$tmp/lib"
		# redis-check-rdb is the server when called redis-server.
		ln -s root/usr/bin/redis-check-rdb "$tmp/redis-server"
		if LD_LIBRARY_PATH=$tmp/lib "$tmp/redis-server" --version | grep -q 'v=6\.0\.'; then
			rm -rf "$r60"
			mv -T "$tmp" "$r60"
		else
			echo "servers.sh: the unpacked Redis 6.0 does not run:" >&2
			LD_LIBRARY_PATH=$tmp/lib "$tmp/redis-server" --version >&2 || true
			rm -rf "$tmp"
			exit 1
		fi
	else
		echo "servers.sh: Redis 6.0 is missing from $r60 and cannot be unpacked here" >&2
	fi
fi
