#!/bin/sh
# Prints the Debian archive this machine's apt is configured with (the
# repository URI of its main Debian suite, e.g. what a sources file names as
# URIs), so that scripts that fetch from other suites (trixie's sources,
# sid's dtrace, guest roots) use the same archive as apt and name no host.
#   scripts/debian-archive.sh      prints e.g. http://ftp.example.org/debian/
# DTRACE_DEBIAN_ARCHIVE, when set, is printed instead (a machine whose apt
# has no Debian archive: Ubuntu, or a proxy of another name).
# Exits 1, saying why, when apt has no Debian archive.
set -eu
if [ -n "${DTRACE_DEBIAN_ARCHIVE:-}" ]; then
    echo "$DTRACE_DEBIAN_ARCHIVE"
    exit 0
fi
# apt's own list of what it fetches: the repository, the suite and the
# Release file's Origin, for every configured "deb" index. Suites ending in
# -security or -updates are served from other trees; the main suite is the
# archive. Each repository once, and the first kept with `sed -n 1p`, which
# reads to the end: `head -1` would close the pipe early, and a writer
# whose SIGPIPE is ignored (a child of the Erlang VM, as the suites run
# this) then fails with "echo: I/O error".
uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' 2>/dev/null |
    awk '$3 == "deb" && $2 !~ /-(security|updates|backports|proposed-updates)$/ && !seen[$1]++ { print $1 }' |
    while read -r repo; do
        # The Release file apt keeps for this repository says whose it is.
        base=$(printf '%s' "$repo" | sed -e 's|^[a-z+]*://||' -e 's|/*$||' -e 's|/|_|g')
        if grep -qs '^Origin: Debian$' /var/lib/apt/lists/"${base}"_dists_*Release; then
            echo "$repo"
        fi
    done | sed -n 1p)
if [ -z "$uri" ]; then
    echo "debian-archive: apt is configured with no Debian archive (run apt-get update first, or set DTRACE_DEBIAN_ARCHIVE)" >&2
    exit 1
fi
echo "$uri"
