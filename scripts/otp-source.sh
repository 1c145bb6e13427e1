#!/bin/sh
# Downloads, once, the upstream ("orig") source tarball of a Debian source
# package into the toolchain cache, checks it against the SHA256 sum in the
# suite's Sources index, and prints its path. Where the suites read OTP's own
# example scripts (lib/runtime_tools/examples) and test suites
# (lib/runtime_tools/test/dyntrace_SUITE.erl) without copying them into the
# repository.
#   scripts/otp-source.sh               erlang of trixie (OTP 27.3.4.1)
#   scripts/otp-source.sh erlang sid    OTP 29
#   scripts/otp-source.sh PKG [SUITE]   another source package
# Cache: $DTRACE_TOOLCHAINS/src (default /var/cache/dtrace-toolchains as
# root, else ~/.cache/dtrace-toolchains). The suite's deb-src index is kept
# in a private apt state directory ($cache/apt-SUITE; the machine's own
# sources are left alone) and fetched again only when it does not name the
# package. The archive is the one apt is configured with
# (scripts/debian-archive.sh), never a host named here.
#
# An archive that is a snapshot may not serve the tarball its sid index
# names (erlang 29.1.2 answered 404 where 29.1.1 was served): then the
# pinned fallback below is fetched instead, checked against the sum of its
# own .dsc (Checksums-Sha256), which is written here.
set -eu
pkg=${1:-erlang}
suite=${2:-trixie}
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
apt_dir=$cache/apt-$suite
mkdir -p "$apt_dir/lists/partial"
archive=$("$(dirname "$0")/debian-archive.sh")
# Sid's Release file in a snapshot archive is past its Valid-Until.
echo "deb-src [check-valid-until=no] $archive $suite main" > "$apt_dir/sources.list"
# No default release: the roots of scripts/guest.sh set one, which apt
# refuses when only source indexes are configured.
apt_opts="-o Dir::Etc::sourcelist=$apt_dir/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$apt_dir/lists -o APT::Default-Release="
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
[ -n "$line" ] || { log "$suite has no source for $pkg"; exit 1; }
url=$(echo "$line" | awk '{print $1}' | tr -d "'")
file=$(echo "$line" | awk '{print $2}')
sum=$(echo "$line" | awk '{print $4}' | sed 's/^SHA256://')
# PKG SUITE FILE SHA256: tarballs fetched when the index's is not served.
fallbacks="erlang sid erlang_29.1.1+dfsg.orig.tar.xz b711f4e9dff76c51aded2574322a18129033594c5244a3710b2b00d9cb0ff348"
if ! echo "$sum  $cache/src/$file" | sha256sum -c --status 2>/dev/null; then
    log "downloading $file"
    if ! curl -fsSL -o "$cache/src/$file.part" "$url"; then
        rm -f "$cache/src/$file.part"
        fallback=$(echo "$fallbacks" | awk -v p="$pkg" -v s="$suite" '$1 == p && $2 == s { print $3, $4 }')
        [ -n "$fallback" ] || { log "$url is not served"; exit 1; }
        url=$(dirname "$url")/${fallback% *}
        file=${fallback% *}
        sum=${fallback#* }
        if ! echo "$sum  $cache/src/$file" | sha256sum -c --status 2>/dev/null; then
            log "not served; downloading the pinned $file"
            curl -fsSL -o "$cache/src/$file.part" "$url"
        fi
    fi
    [ -f "$cache/src/$file.part" ] && mv "$cache/src/$file.part" "$cache/src/$file"
    echo "$sum  $cache/src/$file" | sha256sum -c --status || { log "$file: SHA256 mismatch"; exit 1; }
fi
chmod -R a+rX "$cache/src" 2>/dev/null || true
echo "$cache/src/$file"
