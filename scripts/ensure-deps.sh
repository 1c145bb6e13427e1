#!/bin/sh
# Installs the system packages dtrace's build, tests and demo need, when
# they are missing. Debian/Ubuntu: apt-get (as root, or through sudo).
# Elsewhere: says plainly what is missing and stops.
#   scripts/ensure-deps.sh            build + tests + demo
set -eu

# command -> Debian package
# lttng-relayd (lttng-tools too): the flight recorder's relay tests.
# flake8, mypy, pytest: make python-check (Debian's, for the system Python).
# mmdebstrap .. curl: scripts/dtrace-sid.sh (Oracle's DTrace from sid) and
# scripts/otp-source.sh; qemu-system-x86_64 .. cpio: scripts/guest.sh, the
# QEMU guests the DTrace tests run in (it checks that busybox is the static
# one itself).
need="erl:erlang-nox erlc:erlang-dev rebar3:rebar3 elixir:elixir bpftrace:bpftrace gdb:gdb perf:linux-perf readelf:binutils cc:gcc lttng:lttng-tools lttng-relayd:lttng-tools babeltrace2:babeltrace2
  flake8:flake8 mypy:mypy pytest:python3-pytest
  mmdebstrap:mmdebstrap xz:xz-utils curl:curl
  qemu-system-x86_64:qemu-system-x86 busybox:busybox-static cpio:cpio"
# Erlang applications (no command to look for) -> Debian package
need_apps="common_test:erlang-common-test proper:erlang-proper dialyzer:erlang-dialyzer runtime_tools:erlang-runtime-tools"
# Header files (no command, no application to look for) -> Debian package;
# Debian keeps lttng-ust's headers in the multiarch directory. python3-bt2:
# babeltrace2's Python bindings, for the flight recorder's report
# (priv/bin/dtrace-recorder-report), in the system Python's dist-packages.
# systemtap-sdt-dev: <sys/sdt.h>, for make bench's C floors (bare SDT sites);
# without it those rows were skipped on a fresh machine.
need_files="/usr/lib/erlang/lib/proper-*/include/proper.hrl:erlang-proper-dev
  /usr/include/*/lttng/tracepoint.h:liblttng-ust-dev
  /usr/lib/python3/dist-packages/bt2/__init__.py:python3-bt2
  /usr/include/*/sys/sdt.h:systemtap-sdt-dev"

missing=
for pair in $need; do
    cmd=${pair%%:*}; pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || missing="$missing $pkg"
done
if command -v erl >/dev/null 2>&1; then
    for pair in $need_apps; do
        app=${pair%%:*}; pkg=${pair#*:}
        erl -noshell -eval "case code:lib_dir($app) of {error, _} -> halt(1); _ -> halt(0) end." \
            >/dev/null 2>&1 || missing="$missing $pkg"
    done
else
    for pair in $need_apps; do missing="$missing ${pair#*:}"; done
fi

for pair in $need_files; do
    pattern=${pair%%:*}; pkg=${pair#*:}
    # shellcheck disable=SC2086 # the pattern is meant to glob
    ls $pattern >/dev/null 2>&1 || missing="$missing $pkg"
done

if ! command -v cargo >/dev/null 2>&1; then
    echo "dtrace: cargo is missing. Install Rust >= 1.85: Debian 13's cargo package, or rustup" >&2
    echo "        (https://rustup.rs) where the distribution's is older (Debian 12: 1.63)." >&2
    exit 1
fi

[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "dtrace: missing system packages (Debian names):$missing" >&2
    echo "        install their equivalents with your package manager and run again." >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=
elif command -v sudo >/dev/null 2>&1; then
    echo "dtrace: installing$missing with sudo"
    sudo=sudo
else
    echo "dtrace: missing packages:$missing; run as root: apt-get install$missing" >&2
    exit 1
fi
echo "dtrace: installing$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
