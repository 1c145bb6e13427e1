#!/bin/sh
# Runs a command as root in a QEMU guest that boots a Debian kernel with its
# own Debian userland, for the tracers this host cannot run: Oracle's Linux
# DTrace needs CUSE for USDT (its daemon dtprobed provides /dev/dtrace/helper
# through CUSE), and this host's kernel has neither CUSE nor loadable modules.
#
#   scripts/guest.sh root NAME                 build the root NAME if needed
#   scripts/guest.sh run NAME [-s DIR]... [-t SECONDS] -- COMMAND [ARG...]
#                                              boot NAME's kernel, run COMMAND
#   scripts/guest.sh chroot NAME [-s DIR]... -- COMMAND [ARG...]
#                                              COMMAND in a chroot of NAME on
#                                              the host (native speed: builds)
#   scripts/guest.sh container NAME [-s DIR]... -- COMMAND [ARG...]
#                                              the same, the root made the
#                                              mount namespace's own root
#                                              (pivot_root) as a container's
#                                              is: the paths of its files in
#                                              /proc/PID/maps are the root's
#   scripts/guest.sh list                      the roots this script knows
#
# Roots (the table below): a Debian root made with mmdebstrap, cached in
# $DTRACE_GUESTS/NAME (default /var/cache/dtrace-guests/NAME) and reused
# when complete: NAME/complete, written last, holds the hash of the table's
# entry, of its setup's steps and of the build recipe, so a changed entry
# rebuilds the root. An entry's setup (a fourth field) is a command run in
# the checkout that prints shell steps, run in the root (chroot, sh -eu)
# once its packages are in. A
# package written PKG/SUITE comes from SUITE (a second source, e.g. sid's
# dtrace on a trixie root); everything else, its dependencies included where
# the root's own suite satisfies them, from the root's suite
# (APT::Default-Release). The archive is the one apt is configured with
# (scripts/debian-archive.sh).
#
# `run` boots the root's own kernel (/vmlinuz) with a small initramfs made
# from busybox-static and the root's 9p/overlay modules. The root is shared
# read-only over virtio-9p and mounted under an overlay whose upper layer is
# a tmpfs, so the guest cannot change the cache. The checkout this script
# belongs to (its git top directory), every -s DIR and every directory in
# $DTRACE_GUEST_SHARES are shared read-write at the same paths: DTrace opens
# every file a traced process maps, by the path in /proc/PID/maps. proc,
# sys, dev, devpts, debugfs, tracefs, securityfs, bpffs and tmpfs /tmp, /run are mounted.
# When the root has dtprobed (Linux DTrace's USDT daemon), `modprobe cuse`,
# dtprobed is started and the run waits (60 s at most) for
# /dev/dtrace/helper. COMMAND then runs as root (PATH, HOME=/root,
# LANG=C.UTF-8, stdin /dev/null) in the host's working directory when that
# is shared, else in the checkout; its output is printed on the console,
# which this script copies to its standard output, and the guest powers off.
# The exit status is COMMAND's (the guest prints a marker line with it), or
# 124 when the whole run exceeds its deadline ($DTRACE_GUEST_TIMEOUT or -t,
# default 900 s), or 125 when the guest ended without a status (panic,
# harness failure: the console's tail is printed).
#
# Why TCG: /dev/kvm on the machines this was written on is KVM-PVM, which
# runs only PVM guest kernels; with a Debian kernel QEMU's KVM fails or hangs.
# So QEMU emulates (-accel tcg,thread=multi): function is real, timings
# inside the guest are not (several times slower than the host).
#
# Measured on a 2-core Debian 12 host (kernel 6.18) with other builds
# running: the trixie-dtrace root 49-77 s to build (290 MB; trixie-build 54 s),
# the initramfs under 1 s, boot to the command in 4-9 s, a trivial
# command's whole round trip 5-10 s; in the guest dtprobed's helper device
# appears within 0.9 s, the first `dtrace -n BEGIN` takes 9-19 s,
# `dtrace -l` 7-14 s.
#
# Needs root, and the packages qemu-system-x86, busybox-static, mmdebstrap,
# cpio, xz-utils (installed with apt-get when missing).
set -eu

# NAME|SUITE|PACKAGES[|SETUP]: the roots. Keep them lean, `make test` boots them.
# trixie-dtrace: Debian 13's kernel (6.12) and OTP 27.3.4.1, sid's DTrace
#   (2.0.7; needs glibc >= 2.38, which trixie has) and dtprobed.
# trixie-build: the same userland with a C toolchain and sid's DTrace, for
#   `chroot` builds of test programs (dtrace -h, dtrace -G) the guest runs.
# bookworm-kernel, trixie-kernel: Debian 12 (kernel 6.1, OTP 25.2.3,
#   bpftrace 0.17, SystemTap 4.8) and Debian 13 (6.12, OTP 27.3, bpftrace
#   0.23, SystemTap 5.1) as users run them, with perf and gdb, for
#   `make test-kernels` (dtrace_kernels_SUITE). The kernel's headers and
#   the compiler are there for `chroot` builds of SystemTap modules (seconds
#   natively, minutes under TCG); the guest runs them with staprun.
# trixie-userland, sid-userland: Debian 13's and sid's own packages, no
#   kernel (trixie: OTP 27, Elixir 1.18, rebar3 3.24, cargo and rustc 1.85,
#   bpftrace 0.23; sid: OTP 29, Elixir 1.20, Rust 1.97, bpftrace 0.27,
#   RabbitMQ 4.3, DTrace 2.0.7; both PropEr, gdb, perf, LTTng), for `make
#   test-trixie` and `make test-sid` (scripts/userland.sh), which build the
#   library with that Rust and run suites in a `chroot` against the host's
#   kernel.
# kit-trixie: the image of kit/Dockerfile (the operators' kit's container
#   recipe) before the kit is copied in: Debian 13 with only bpftrace and
#   python3, installed by the recipe's own RUN steps (scripts/kit-image.sh);
#   for dtrace_kit_SUITE.
roots='
trixie-dtrace|trixie|linux-image-amd64 kmod fuse3 procps erlang-base erlang-runtime-tools erlang-common-test dtrace/sid libdtrace2/sid
trixie-build|trixie|gcc libc6-dev dtrace/sid libdtrace2/sid
bookworm-kernel|bookworm|linux-image-amd64 linux-headers-amd64 kmod procps python3 erlang-base erlang-runtime-tools erlang-common-test bpftrace linux-perf gdb systemtap systemtap-runtime
trixie-kernel|trixie|linux-image-amd64 linux-headers-amd64 kmod procps python3 erlang-base erlang-runtime-tools erlang-common-test bpftrace linux-perf gdb systemtap systemtap-runtime
trixie-userland|trixie|erlang-nox erlang-dev erlang-common-test elixir rebar3 cargo rustc gcc libc6-dev liblttng-ust-dev make git ca-certificates curl xz-utils procps python3 python3-pytest flake8 mypy binutils bpftrace gdb linux-perf lttng-tools babeltrace2 python3-bt2 erlang-proper erlang-proper-dev rabbitmq-server python3-pika dtrace/sid libdtrace2/sid
sid-userland|sid|erlang-nox erlang-dev erlang-common-test elixir rebar3 cargo rustc gcc libc6-dev liblttng-ust-dev make git ca-certificates curl xz-utils procps python3 python3-pytest flake8 mypy binutils bpftrace gdb linux-perf lttng-tools babeltrace2 python3-bt2 erlang-proper erlang-proper-dev rabbitmq-server python3-pika dtrace libdtrace2
kit-trixie|trixie||sh scripts/kit-image.sh base trixie
'
# Bump when the way roots are built changes (options below, hooks).
recipe=1

here=$(cd "$(dirname "$0")" && pwd)
log() { echo "guest: $*" >&2; }
die() { log "$*"; exit 2; }
usage() { sed -n '8,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

if [ "$(id -u)" -eq 0 ]; then
    cache=${DTRACE_GUESTS:-/var/cache/dtrace-guests}
else
    die "needs root (mmdebstrap, chroot, QEMU's 9p shares with the files' owners)"
fi

entry() {
    printf '%s\n' "$roots" | awk -F'|' -v n="$1" '$1 == n { print; found = 1 } END { exit !found }' ||
        die "no root named $1 (scripts/guest.sh list)"
}

ensure_tools() {
    missing=
    for pair in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static mmdebstrap:mmdebstrap \
        cpio:cpio xz:xz-utils unshare:util-linux; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
    done
    # Debian's dynamic busybox cannot run from the initramfs.
    if [ -z "$missing" ] && ! busybox_static; then missing=" busybox-static"; fi
    [ -z "$missing" ] && return 0
    log "installing$missing"
    apt-get update -qq >&2
    # shellcheck disable=SC2086 # a list of packages
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
}
busybox_static() {
    dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed'
}

# root NAME: builds NAME's root unless the cache holds it complete for the
# current entry; sets $rootdir. Builders hold NAME.lock exclusively, runs
# hold it shared (use_root), so a root is never rebuilt under a guest.
build_root() {
    line=$(entry "$1")
    name=$1
    suite=$(echo "$line" | cut -d'|' -f2)
    pkgs=$(echo "$line" | cut -d'|' -f3)
    setup=$(echo "$line" | cut -d'|' -f4)
    if [ -n "$setup" ]; then
        setup=$(cd "$here/.." && sh -c "$setup") || die "root $name: its setup command failed"
    fi
    hash=$({ printf '%s\nrecipe=%s\n' "$line" "$recipe"; [ -z "$setup" ] || printf '%s\n' "$setup"; } |
        sha256sum | cut -c1-16)
    rootdir=$cache/$name/root
    [ "$(cat "$cache/$name/complete" 2>/dev/null)" = "$hash" ] && return 0
    mkdir -p "$cache/$name"
    # One builder at a time; a second waits and then finds the root built.
    exec 9>"$cache/$name.lock"
    flock 9
    if [ "$(cat "$cache/$name/complete" 2>/dev/null)" = "$hash" ]; then exec 9>&-; return 0; fi
    ensure_tools
    archive=$("$here/debian-archive.sh")
    # The root's suite, and each other suite a package names (PKG/SUITE) as a
    # second source. Sid's Release file in a snapshot archive is past its
    # Valid-Until: checked for the root's suite, unless that is sid, and not
    # for the others.
    case $suite in
        sid) set -- "deb [check-valid-until=no] $archive $suite main" ;;
        *) set -- "deb $archive $suite main" ;;
    esac
    # shellcheck disable=SC2086 # one package a line
    for other in $(printf '%s\n' $pkgs | sed -n 's|^[^/]*/||p' | sort -u); do
        [ "$other" = "$suite" ] || set -- "$@" "deb [check-valid-until=no] $archive $other main"
    done
    log "building root $name ($suite: ${pkgs:-minbase}${setup:+, then its setup}) in $cache/$name (1-4 minutes)"
    rm -f "$cache/$name/complete"
    rm -rf "$rootdir" "$rootdir.new"
    printf '%s\n' "$setup" > "$cache/$name/setup.sh"
    start=$(date +%s)
    # INITRD=No: the kernel's postinst skips update-initramfs (the guest
    # boots from the initramfs made here; ~40 MB and ~20 s saved).
    # Documentation, manuals and translations are left out. The hooks'
    # $1 is the root being built (mmdebstrap's argument).
    # shellcheck disable=SC2016
    INITRD=No mmdebstrap --variant=minbase --mode=root --format=directory --quiet \
        --aptopt="APT::Default-Release \"$suite\"" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        ${pkgs:+--include="$pkgs"} \
        --customize-hook='echo guest > "$1/etc/hostname"' \
        --customize-hook='rm -f "$1"/boot/initrd.img*' \
        ${setup:+--customize-hook="cp '$cache/$name/setup.sh' \"\$1/tmp/dtrace-setup.sh\""} \
        ${setup:+--customize-hook='chroot "$1" sh -eu /tmp/dtrace-setup.sh && rm "$1/tmp/dtrace-setup.sh"'} \
        "$suite" "$rootdir.new" "$@" >&2
    mv "$rootdir.new" "$rootdir"
    echo "$hash" > "$cache/$name/complete"
    log "root $name built in $(($(date +%s) - start)) s ($(du -sh "$rootdir" | cut -f1))"
    exec 9>&-
}

# use_root NAME: build_root, then a shared hold on the root until this
# script (and QEMU, which inherits the descriptor) ends.
use_root() {
    build_root "$1"
    exec 8>>"$cache/$1.lock"
    flock -s 8
    [ "$(cat "$cache/$1/complete" 2>/dev/null)" = "$hash" ] ||
        die "root $1 was rebuilt meanwhile; run again"
}

# The checkout this script belongs to, then -s directories and
# $DTRACE_GUEST_SHARES: printed one per line, absolute, existing, unique.
shares() {
    top=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/.." && pwd))
    # shellcheck disable=SC2086 # a list of directories
    for d in "$top" $extra_shares ${DTRACE_GUEST_SHARES:-}; do
        [ -d "$d" ] || die "cannot share $d: not a directory"
        (cd "$d" && pwd -P)
    done | awk '!seen[$0]++'
}

# quote ARG...: one shell-quoted line that runs ARG... as given.
quote() {
    for a in "$@"; do
        printf "'%s' " "$(printf '%s' "$a" | sed "s/'/'\\\\''/g")"
    done
}

# The host's working directory inside the guest when it is shared, else the
# checkout.
guest_cwd() {
    pwd=$(pwd -P)
    printf '%s\n' "$1" | while read -r d; do
        case "$pwd/" in "$d"/*) echo "$pwd"; exit 0;; esac
    done | head -1 | grep . || printf '%s\n' "$1" | head -1
}

# initramfs RUNDIR: RUNDIR/initramfs.cpio.gz, busybox, the modules to mount
# the root (9p over virtio, overlay) from the root's /lib/modules, and init.
make_initramfs() {
    ird=$1/initramfs
    mkdir -p "$ird/bin" "$ird/modules" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/lower" "$ird/upper" "$ird/newroot"
    cp "$(command -v busybox)" "$ird/bin/busybox"
    kver=$(basename "$(readlink -f "$rootdir/vmlinuz")" | sed 's/^vmlinuz-//')
    moddir=$rootdir/lib/modules/$kver
    [ -f "$moddir/modules.dep" ] || die "root $name has no modules for kernel $kver"
    # Each module after the modules it needs (modules.dep lists a module's
    # dependencies, the last one first to load); decompressed, so busybox's
    # insmod needs no xz support.
    : > "$ird/modules/order"
    # virtio_pci is built into Debian 13's kernel, a module in Debian 12's.
    for m in virtio_pci 9pnet_virtio 9p overlay; do
        path=$(awk -v m="$m" '{ f = $1; sub(":$", "", f); n = f; sub(".*/", "", n); sub("\\.ko.*", "", n)
                              gsub("-", "_", n); if (n == m) { print f; exit } }' "$moddir/modules.dep")
        [ -n "$path" ] || continue        # built into the kernel
        deps=$(awk -v f="$path:" '$1 == f { for (i = NF; i > 1; i--) print $i }' "$moddir/modules.dep")
        for p in $deps $path; do
            base=$(basename "$p" | sed 's/\.ko.*$/.ko/')
            grep -qx "$base" "$ird/modules/order" && continue
            case $p in
                *.xz) xz -dc "$moddir/$p" > "$ird/modules/$base" ;;
                *.zst) zstd -qdc "$moddir/$p" > "$ird/modules/$base" ;;
                *.gz) gzip -dc "$moddir/$p" > "$ird/modules/$base" ;;
                *) cp "$moddir/$p" "$ird/modules/$base" ;;
            esac
            echo "$base" >> "$ird/modules/order"
        done
    done
    write_init > "$ird/init"
    chmod 755 "$ird/init"
    (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) > "$1/initramfs.cpio.gz"
}

# The initramfs's /init (busybox sh, PID 1): mounts, then the command in a
# chroot of the root, then the status marker and poweroff.
write_init() {
    cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs dev /dev
exec </dev/null >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
fail() { echo "guest: $*"; sync; poweroff -f; sleep 10; }
echo "guest: init"
for m in $(cat /modules/order); do insmod "/modules/$m" || fail "insmod $m failed"; done
opts=trans=virtio,version=9p2000.L,msize=524288
mount -t 9p -o "$opts,ro,cache=loose" root /lower || fail "cannot mount the root"
mount -t tmpfs -o mode=0755 upper /upper
mkdir /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work root /newroot ||
    fail "cannot mount the overlay"
r=/newroot
mount -t proc proc $r/proc
mount -t sysfs sys $r/sys
mount -t devtmpfs dev $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $r/dev/pts
mount -t tmpfs -o mode=1777 shm $r/dev/shm
# What udev makes on a booted system: /dev/fd and the standard streams
# (bash's and DTrace's /dev/fd/N paths need them).
ln -sf /proc/self/fd $r/dev/fd
ln -sf /proc/self/fd/0 $r/dev/stdin
ln -sf /proc/self/fd/1 $r/dev/stdout
ln -sf /proc/self/fd/2 $r/dev/stderr
mount -t tmpfs -o mode=1777 tmp $r/tmp
mount -t tmpfs -o mode=0755 run $r/run
mount -t debugfs debugfs $r/sys/kernel/debug
mount -t tracefs tracefs $r/sys/kernel/tracing
mount -t securityfs securityfs $r/sys/kernel/security
mount -t bpf bpf $r/sys/fs/bpf
mkdir -p $r/run/guest
mount -t 9p -o "$opts,cache=mmap" harness $r/run/guest || fail "cannot mount the harness directory"
while read -r tag dir; do
    mkdir -p "$r$dir"
    mount -t 9p -o "$opts,cache=mmap" "$tag" "$r$dir" || fail "cannot mount $dir"
done < $r/run/guest/shares
hostname "$(cat $r/etc/hostname 2>/dev/null || echo guest)"
echo "guest: userspace"
chroot $r /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb /bin/sh /run/guest/stage2
status=$?
echo "guest: exit status $status, up $(cut -d' ' -f1 /proc/uptime) s"
echo "$status" > $r/run/guest/status
sync
echo "DTRACE-GUEST-STATUS $(cat $r/run/guest/nonce) $status"
poweroff -f
EOF
}

# Stage 2, in the root (its /bin/sh): dtprobed when the root has it, then
# the command.
write_stage2() {
    cat <<'EOF'
set -u
if [ -x /usr/sbin/dtprobed ]; then
    modprobe cuse || { echo "guest: modprobe cuse failed"; exit 125; }
    mkdir -p /run/dtrace
    /usr/sbin/dtprobed -F &
    # A deadline of the clock: under TCG a round costs more than its sleep.
    t0=$(date +%s%N)
    end=$(($(date +%s) + 60))
    while [ ! -e /dev/dtrace/helper ]; do
        [ "$(date +%s)" -le $end ] || { echo "guest: dtprobed made no /dev/dtrace/helper in 60 s"; exit 125; }
        sleep 0.1
    done
    chmod 666 /dev/dtrace/helper
    echo "guest: dtprobed's /dev/dtrace/helper after $((($(date +%s%N) - t0) / 1000000)) ms"
fi
echo "guest: up $(cut -d' ' -f1 /proc/uptime) s after boot, running $(cat /run/guest/cmd)"
cd "$(cat /run/guest/cwd)" || exit 125
/bin/sh /run/guest/cmd </dev/null
EOF
}

# The console's tail when the guest ended before its output was shown.
show_console() {
    grep -q 'guest: init$' "$run/console" && return 0
    log "the console's tail:"
    tail -n 30 "$run/console" >&2
}

run_guest() {
    use_root "$1"
    ensure_tools
    run=$(mktemp -d /tmp/dtrace-guest.XXXXXX)
    # shellcheck disable=SC2064 # $run is meant to expand now
    trap "rm -rf '$run'" EXIT
    trap 'exit 130' INT TERM
    mkdir "$run/harness"
    make_initramfs "$run"
    list=$(shares)
    n=0
    fsdevs=
    : > "$run/harness/shares"
    for d in $list; do
        n=$((n + 1))
        echo "share$n $d" >> "$run/harness/shares"
        fsdevs="$fsdevs -virtfs local,path=$d,mount_tag=share$n,security_model=passthrough"
    done
    shift
    quote "$@" > "$run/harness/cmd"
    guest_cwd "$list" > "$run/harness/cwd"
    write_stage2 > "$run/harness/stage2"
    nonce=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    echo "$nonce" > "$run/harness/nonce"
    start=$(date +%s)
    # The console on stdout; lines before init's first are firmware and
    # kernel noise (kept in the log, shown on failure).
    # One vCPU by default: with two, the 6.12 guest's kernel once died of
    # "Oops: int3" in __schedule while DTrace attached, a breakpoint of the
    # kernel's own text patching (jump labels) seen by the other vCPU after
    # it was gone, which multi-threaded TCG does not always order.
    # shellcheck disable=SC2086 # $fsdevs is a list of options
    {
        rc=0
        timeout -k 10 "$timeout" qemu-system-x86_64 -accel tcg,thread=multi -cpu max \
            -smp "${DTRACE_GUEST_CPUS:-1}" -m "${DTRACE_GUEST_MEM:-2048}" \
            -nographic -no-reboot -nic none \
            -kernel "$rootdir/vmlinuz" -initrd "$run/initramfs.cpio.gz" \
            -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init" \
            -fsdev "local,id=root,path=$rootdir,security_model=passthrough,readonly=on" \
            -device virtio-9p-pci,fsdev=root,mount_tag=root \
            -virtfs "local,path=$run/harness,mount_tag=harness,security_model=passthrough" \
            $fsdevs </dev/null || rc=$?
        echo $rc > "$run/qemu.rc"
    } | tr -d '\r' | tee "$run/console" |
        awk -v nonce="$nonce" -v verbose="${DTRACE_GUEST_VERBOSE:-}" '
            { gsub(/\033(\[[0-9;?]*[A-Za-z]|c)/, "") }
            $1 == "DTRACE-GUEST-STATUS" && $2 == nonce { next }
            /^\[ *[0-9.]+\] reboot: Power down$/ && !verbose { next }
            # init clears the screen first: its line may start with firmware text
            !on && /guest: init$/ { on = 1; if (!verbose) $0 = "guest: init" }
            verbose { on = 1 }
            on { print; fflush() }'
    qemu_rc=$(cat "$run/qemu.rc")
    status=$(awk -v nonce="$nonce" '$1 == "DTRACE-GUEST-STATUS" && $2 == nonce { print $3 }' "$run/console")
    log "guest $name ran $(($(date +%s) - start)) s"
    if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
        log "deadline of $timeout s passed"
        show_console
        exit 124
    fi
    if [ -z "$status" ]; then
        log "the guest ended without a status (QEMU exit $qemu_rc)"
        show_console
        exit 125
    fi
    exit "$status"
}

# chroot NAME -- COMMAND: the root under an overlay with a tmpfs upper layer
# (the cache stays as built), in a private mount namespace, with the shares
# bound at their paths; `container` (the first argument) makes it that
# namespace's root with pivot_root, the old root unmounted, rather than
# chroot into it.
chroot_root() {
    how=$1
    shift
    use_root "$1"
    shift
    run=$(mktemp -d /tmp/dtrace-guest.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$run'" EXIT
    shares > "$run/shares"
    quote "$@" > "$run/cmd"
    guest_cwd "$(cat "$run/shares")" > "$run/cwd"
    # shellcheck disable=SC2016 # the inner script's own variables
    unshare --mount --propagation private /bin/sh -eu -c '
        run=$1 root=$2 how=$3
        mkdir "$run/upper" "$run/new"
        mount -t tmpfs tmpfs "$run/upper"
        mkdir "$run/upper/data" "$run/upper/work"
        mount -t overlay -o "lowerdir=$root,upperdir=$run/upper/data,workdir=$run/upper/work" root "$run/new"
        mount -t proc proc "$run/new/proc"
        mount --rbind /sys "$run/new/sys"
        mount --rbind /dev "$run/new/dev"
        mount -t tmpfs tmp "$run/new/tmp"
        mount -t tmpfs run "$run/new/run"
        while read -r d; do mkdir -p "$run/new$d"; mount --bind "$d" "$run/new$d"; done < "$run/shares"
        mkdir "$run/new/run/guest"
        cp "$run/cmd" "$run/new/run/guest/cmd"
        cwd=$(cat "$run/cwd")
        set -- /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/root LANG=C.UTF-8 TERM=dumb /bin/sh -c "cd \"\$1\" && exec /bin/sh /run/guest/cmd </dev/null" \
            "$how" "$cwd"
        [ "$how" = container ] || exec chroot "$run/new" "$@"
        # As runc does: the old root stacked under the new one, then detached.
        cd "$run/new"
        pivot_root . .
        umount -l .
        exec "$@"
    ' unshare "$run" "$rootdir" "$how"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
    list)
        printf '%s\n' "$roots" | awk -F'|' 'NF >= 3 { printf "%-16s %-8s %s%s\n", $1, $2, $3, (NF > 3 ? "(" $4 ")" : "") }'
        exit 0 ;;
    root)
        [ $# -eq 1 ] || usage
        build_root "$1"
        echo "$rootdir"
        exit 0 ;;
    run|chroot|container) ;;
    *) usage ;;
esac
[ $# -ge 1 ] || usage
root_name=$1
shift
extra_shares=
timeout=${DTRACE_GUEST_TIMEOUT:-900}
while [ $# -gt 0 ]; do
    case $1 in
        -s) [ $# -ge 2 ] || usage; extra_shares="$extra_shares $2"; shift 2 ;;
        -t) [ $# -ge 2 ] || usage; timeout=$2; shift 2 ;;
        --) shift; break ;;
        *) usage ;;
    esac
done
[ $# -ge 1 ] || usage
if [ "$cmd" = run ]; then
    run_guest "$root_name" "$@"
else
    chroot_root "$cmd" "$root_name" "$@"
fi
