#!/bin/sh
# make check-aarch64-run: the aarch64 archives of `make dist` installed and
# loaded as a user on arm64 would, emulated: in a Debian 13 arm64 root
# (mmdebstrap from the archive apt is configured with; cached in
# /var/cache/dtrace-guests/trixie-arm64) whose programs run under
# qemu-user-static through binfmt_misc, Debian's OTP 27 runs
# native/precompiled.escript against dist/ (so the escript's target is
# aarch64-unknown-linux-gnu, read from that VM), then loads the library:
# dtrace:available() must be true, a probe nobody listens to false, and
# dtrace:sinks() must name the SDT notes. No tracer attaches (uprobes
# cannot be set on emulated code). Needs root; installs qemu-user-static
# and binfmt-support when missing. Run `make dist` first.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${DTRACE_GUESTS:-/var/cache/dtrace-guests}
root=$cache/trixie-arm64/root
work=/var/tmp/dtrace-aarch64
die() { echo "aarch64-run: $*" >&2; exit 1; }
ls "$here"/dist/*aarch64-unknown-linux-gnu.so.tar.gz >/dev/null 2>&1 || die "no aarch64 archives in dist/: run make dist"
if ! command -v qemu-aarch64-static >/dev/null 2>&1 || ! command -v update-binfmts >/dev/null 2>&1 ||
    ! command -v arch-test >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static binfmt-support arch-test
fi
[ -d /proc/sys/fs/binfmt_misc ] && [ -f /proc/sys/fs/binfmt_misc/status ] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
    die "binfmt_misc has no qemu-aarch64 entry with the F flag"
pkgs="erlang-base erlang-crypto liblttng-ust1t64"
if [ "$(cat "$cache/trixie-arm64/complete" 2>/dev/null)" != "$pkgs" ]; then
    rm -rf "$cache/trixie-arm64"
    mkdir -p "$cache/trixie-arm64"
    mmdebstrap --architectures=arm64 --variant=minbase --mode=root --format=directory --quiet \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --include="$(echo "$pkgs" | tr ' ' ,)" trixie "$root" "deb $("$here/scripts/debian-archive.sh") trixie main"
    echo "$pkgs" > "$cache/trixie-arm64/complete"
fi
# The package as a user has it: sources, beams built here (they are the
# same on every machine), no library; the archives beside it.
rm -rf "$work"
mkdir -p "$work/dtrace/ebin" "$work/dist"
(cd "$here" && tar -cf - src/dtrace.app.src native/precompiled.escript native/dtrace_nif/Cargo.toml \
    checksum-dtrace_nif.exs) | tar -xf - -C "$work/dtrace"
cp "$here"/_build/default/lib/dtrace/ebin/* "$work/dtrace/ebin/"
cp "$here"/dist/*aarch64-unknown-linux-gnu.so.tar.gz "$work/dist/"
mkdir -p "$root$work"
mount --bind "$work" "$root$work"
trap 'umount "$root$work"' EXIT
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 /bin/sh -eu -c '
    cd "$1/dtrace"
    uname -m
    erl -noshell -eval "io:format(\"~s, OTP ~s~n\", [erlang:system_info(system_architecture), erlang:system_info(otp_release)]), halt()."
    DTRACE_NIF_URL="$1/dist" escript native/precompiled.escript install
    file=$(od -An -tx1 -j18 -N2 priv/dtrace_nif.so | tr -d " \n")
    [ "$file" = b700 ] || { echo "aarch64-run: priv/dtrace_nif.so is not an AArch64 object ($file)" >&2; exit 1; }
    erl -noshell -pa ebin -eval "
        true = dtrace:available(),
        false = dtrace:p(1, <<\"nobody listens\">>),
        Sinks = dtrace:sinks(),
        io:format(\"dtrace:available() true, p/2 false, sinks ~p~n\", [Sinks]),
        halt()."
' aarch64-run "$work"
echo "aarch64-run: the aarch64 archives installed and loaded in Debian 13 arm64's OTP (emulated)"
