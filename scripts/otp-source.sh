#!/bin/sh
# Downloads, once, the upstream ("orig") source tarball of a Debian 13
# (trixie) source package into the toolchain cache, checks it against the
# SHA256 sum in trixie's Sources index, and prints its path. What
# scripts/otp27.sh builds OTP 27, Elixir and PropEr from, and where the
# DTrace suite reads OTP's own example D scripts
# (lib/runtime_tools/examples/*.d) without copying them into the repository.
#   scripts/otp-source.sh               erlang (OTP 27.3.4.1)
#   scripts/otp-source.sh elixir-lang   or erlang-proper
# Cache: $DTRACE_TOOLCHAINS/src (default /var/cache/dtrace-toolchains as
# root, else ~/.cache/dtrace-toolchains). trixie's deb-src index is kept in
# a private apt state directory ($cache/apt; the machine's own sources are
# left alone) and fetched again only when it does not name the package. The
# archive is the one apt is configured with (scripts/debian-archive.sh),
# never a host named here.
set -eu
pkg=${1:-erlang}
if [ "$(id -u)" -eq 0 ]; then
    default_cache=/var/cache/dtrace-toolchains
else
    default_cache=$HOME/.cache/dtrace-toolchains
fi
cache=${DTRACE_TOOLCHAINS:-$default_cache}
log() { echo "otp-source: $*" >&2; }

command -v curl >/dev/null 2>&1 || {
    log "installing curl"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl >&2
}

mkdir -p "$cache/src"
apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial"
archive=$("$(dirname "$0")/debian-archive.sh")
echo "deb-src $archive trixie main" > "$apt_dir/sources.list"
apt_opts="-o Dir::Etc::sourcelist=$apt_dir/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$apt_dir/lists"
uris() {
    # shellcheck disable=SC2086 # the options are meant to split
    apt-get $apt_opts source --print-uris "$pkg" 2>/dev/null | grep "\.orig\.tar" | head -1
}
line=$(uris || true)
if [ -z "$line" ]; then
    # shellcheck disable=SC2086
    apt-get $apt_opts update -qq >&2
    line=$(uris || true)
fi
[ -n "$line" ] || { log "trixie has no source for $pkg"; exit 1; }
url=$(echo "$line" | awk '{print $1}' | tr -d "'")
file=$(echo "$line" | awk '{print $2}')
sum=$(echo "$line" | awk '{print $4}' | sed 's/^SHA256://')
if ! echo "$sum  $cache/src/$file" | sha256sum -c --status 2>/dev/null; then
    log "downloading $file"
    curl -fsSL -o "$cache/src/$file.part" "$url"
    mv "$cache/src/$file.part" "$cache/src/$file"
    echo "$sum  $cache/src/$file" | sha256sum -c --status || { log "$file: SHA256 mismatch"; exit 1; }
fi
chmod -R a+rX "$cache/src" 2>/dev/null || true
echo "$cache/src/$file"
