#!/bin/sh
# Oracle's Linux DTrace (Debian sid's `dtrace` 2.0.7) on a host whose own
# distribution lacks it (Debian 12: it needs glibc >= 2.38). Makes, once, a
# sid root with mmdebstrap (cached, reused when complete), and a wrapper that
# runs sid's dtrace through sid's own loader, so that it sees the host's
# files (/proc/PID/maps of a traced node names host paths; inside a chroot
# DTrace cannot open them). Prints the wrapper's path:
#   "$(scripts/dtrace-sid.sh)" -n 'BEGIN { exit(0) }'
#   "$(scripts/dtrace-sid.sh)" -l -p $PID -n 'erlang$target:::'
# Cache: $DTRACE_TOOLCHAINS/dtrace-sid (default /var/cache/dtrace-toolchains
# as root, else ~/.cache/dtrace-toolchains); the root is about 300 MB and
# 45 s to make. Needs root (mmdebstrap, and DTrace itself).
#
# The wrapper, on every run (each step only when needed, so it is idempotent):
# - mounts debugfs at /sys/kernel/debug: DTrace reads
#   /sys/kernel/debug/tracing (compiled in), or every enabling fails with
#   "Failed to enable dtrace:::BEGIN: No such file or directory";
# - links /usr/lib/x86_64-linux-gnu/dtrace (its D library directory, compiled
#   in) to the root's copy when the host has none;
# - moves aside the D library file (6.10/io.d) a trivial script fails to
#   compile because of, once: it names vmlinux`major_names, which a kernel
#   with BTF but no CTF and no CONFIG_KALLSYMS_ALL cannot resolve, and then
#   every script fails. (-xnolibs is no way out: arg0 is then "not
#   implemented".)
set -eu
if [ "$(id -u)" -eq 0 ]; then
    default_cache=/var/cache/dtrace-toolchains
else
    default_cache=$HOME/.cache/dtrace-toolchains
fi
cache=${DTRACE_TOOLCHAINS:-$default_cache}
root=$cache/dtrace-sid
wrapper=$cache/dtrace-sid.run
log() { echo "dtrace-sid: $*" >&2; }
# On a system that has sid's dtrace installed (the sid root of make
# test-sid), that one, with the same wrapper, and no root of its own.
if dpkg-query -W -f '${Status}' dtrace 2>/dev/null | grep -q 'install ok installed'; then
    root=
    wrapper=$cache/dtrace-native.run
fi

case "$(uname -m)" in
    x86_64) ;;
    *) log "only x86_64 is handled (the loader and library paths are x86_64's)"; exit 1 ;;
esac

if [ -n "$root" ] && [ ! -f "$root/.complete" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        log "making the sid root needs root"
        exit 1
    fi
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        log "installing mmdebstrap"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2
    fi
    archive=$("$(dirname "$0")/debian-archive.sh")
    mkdir -p "$cache"
    rm -rf "$root" "$root.tmp"
    log "making a sid root with dtrace in $root (about a minute)"
    # The archive's snapshot of sid may carry an expired Release file.
    mmdebstrap --variant=apt --include=dtrace,libdtrace2 \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        sid "$root.tmp" "$archive" >&2 ||
        { log "mmdebstrap failed"; rm -rf "$root.tmp"; exit 1; }
    [ -x "$root.tmp/usr/sbin/dtrace" ] || { log "the root has no usr/sbin/dtrace"; exit 1; }
    mv "$root.tmp" "$root"
    touch "$root/.complete"
fi

# The wrapper is rewritten when this script is newer (its steps may change).
if [ ! -x "$wrapper" ] || [ "$0" -nt "$wrapper" ]; then
    mkdir -p "$cache"
    cat > "$wrapper.tmp" <<WRAPPER
#!/bin/sh
# Written by dtrace's scripts/dtrace-sid.sh: runs Debian sid's dtrace from
# $root through sid's own loader (see that script for why).
set -eu
root=$root
WRAPPER
    cat >> "$wrapper.tmp" <<'WRAPPER'
if ! grep -qs ' /sys/kernel/debug debugfs ' /proc/mounts; then
    mount -t debugfs none /sys/kernel/debug 2>/dev/null || true
fi
libdir=/usr/lib/x86_64-linux-gnu/dtrace
if [ ! -e "$libdir" ]; then
    # Absent, or a link left dangling by a root since removed.
    ln -sfn "$root$libdir" "$libdir" 2>/dev/null || true
fi
run() {
    "$root/lib64/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu" \
        "$root/usr/sbin/dtrace" "$@"
}
# Checked once: a D library translator that names vmlinux`major_names
# (6.10/io.d) makes every script fail to compile on a kernel that cannot
# resolve it; the error names the file, which is moved aside (at most a few).
stamp=${root:-/var/lib/dtrace}/.libs-checked
mkdir -p "$(dirname "$stamp")"
n=0
while [ ! -f "$stamp" ] && [ $n -lt 4 ]; do
    n=$((n + 1))
    if out=$(run -e -n 'BEGIN { exit(0) }' 2>&1); then
        touch "$stamp"
        break
    fi
    f=$(printf '%s\n' "$out" | sed -n 's|.*"\('"$libdir"'/[^"]*\.d\)", line [0-9]*: failed to resolve vmlinux`major_names.*|\1|p' | head -1)
    [ -n "$f" ] || break
    f=$root$f
    [ -f "$f" ] || break
    mv "$f" "$f.disabled"
    echo "dtrace-sid: moved aside $f (it names vmlinux\`major_names, which this kernel cannot resolve)" >&2
done
exec "$root/lib64/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu" \
    "$root/usr/sbin/dtrace" "$@"
WRAPPER
    chmod 755 "$wrapper.tmp"
    mv "$wrapper.tmp" "$wrapper"
fi
chmod -R a+rX "$cache/dtrace-sid.run" 2>/dev/null || true
echo "$wrapper"
