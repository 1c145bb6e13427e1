#!/bin/sh
# make test-trixie, make test-sid: the library built and tested with a
# Debian release's own packages, no VM: a chroot of the root DIST-userland
# (scripts/guest.sh; mmdebstrap from the Debian archive apt is configured
# with, cached in /var/cache/dtrace-guests) on this machine's kernel.
#   trixie (Debian 13): OTP 27, Elixir 1.18, rebar3 3.24, cargo and rustc
#     1.85, bpftrace 0.23, gdb 16, perf 6.12, LTTng 2.13, RabbitMQ 4.0,
#     Python 3.13, and sid's DTrace 2.0.7;
#   sid: OTP 29, Elixir 1.20, rebar3 3.28, Rust 1.97, bpftrace 0.27, gdb 18,
#     perf 7, LTTng 2.16, RabbitMQ 4.3, Python 3.13, DTrace 2.0.7.
# In it, from a copy of this checkout (tracked and new files):
#   - the versions, written to versions.txt in the copy;
#   - cargo build and cargo test with Debian's Rust (native/build-nif.sh);
#   - rebar3 as test compile (warnings_as_errors) and mix compile
#     --warnings-as-errors: no warning on this OTP and Elixir;
#   - the tools' Python checks (make python-check) on its Python;
#   - bpftrace reading argument 6 to 9 of a user probe through
#     priv/bin/dtrace-bpftrace (bpftrace before 0.24 refuses arg6 and later on
#     x86_64 itself), and, on sid, with bpftrace alone;
#   - the Elixir layer's tests (mix test);
#   - the Common Test suites, all but the QEMU guests' (make test-kernels),
#     with CI=true: a tracer missing there fails; OTP's own dyntrace_SUITE
#     and example scripts come from the source of the release's OTP. The
#     viewer checks and the container suite are the host's
#     (DTRACE_TEST_VIEWER=none, DTRACE_TEST_CHROOT=1).
# Work and logs stay in $DTRACE_USERLAND_WORK (default
# /var/tmp/dtrace-DIST; the copy, its _build with Common Test's logs),
# cargo's downloads in /var/cache/dtrace-toolchains/DIST-cargo. Needs root
# (chroot, bpftrace).
#   scripts/userland.sh trixie|sid [SUITE...]     (default: every suite)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dist=${1:?usage: scripts/userland.sh trixie|sid [SUITE...]}
shift
case $dist in
    trixie) rust="rustc 1.85." ;;
    sid) rust= ;;
    *) echo "userland: no root for $dist (trixie or sid)" >&2; exit 2 ;;
esac
work=${DTRACE_USERLAND_WORK:-/var/tmp/dtrace-$dist}
cargo_home=/var/cache/dtrace-toolchains/$dist-cargo
suites=
[ $# -eq 0 ] || suites="--suite $(echo "$@" | tr ' ' ',')"

# bpftrace 0.27 reads /sys/kernel/tracing, which the chroot's /sys binds.
sh "$here/scripts/tracefs.sh"
rm -rf "$work"
mkdir -p "$work/dtrace" "$cargo_home"
# The checkout's files as they are now, without build products, committed
# in a repository of the copy's own (the release suite depends on it by
# git URL).
(cd "$here" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -xf - -C "$work/dtrace"
git -C "$work/dtrace" init -q
git -C "$work/dtrace" add -A
git -C "$work/dtrace" -c user.name=dtrace -c user.email=dtrace@localhost commit -qm "the checkout, as copied"
# The archive apt is configured with here (the chroot's apt has no lists),
# and OTP's sources in the host's cache, fetched here if needed.
archive=$("$here/scripts/debian-archive.sh")
sources=/var/cache/dtrace-toolchains/src
sh "$here/scripts/otp-source.sh" erlang "$dist" >/dev/null
# This machine's CA certificates, for cargo's downloads: a proxy's CA the
# chroot's own store lacks is among them where one is configured.
cainfo=
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$work/ca-certificates.crt"
    cainfo=$work/ca-certificates.crt
fi

# shellcheck disable=SC2016 # expanded in the chroot
# DTRACE_TEST_VIEWER=none: the viewer (Chromium) is the host's, and make
# test opens the files the tools write.
exec "$here/scripts/guest.sh" chroot "$dist-userland" -s "$work" -s "$cargo_home" -s "$sources" -- \
    env CARGO_HOME="$cargo_home" ${cainfo:+CARGO_HTTP_CAINFO="$cainfo"} CI=true SUITES="$suites" \
    DIST="$dist" RUST="$rust" DTRACE_DEBIAN_ARCHIVE="$archive" DTRACE_TEST_VIEWER=none DTRACE_TEST_CHROOT=1 /bin/sh -eu -c '
cd "$1"
# Peer nodes (-sname) resolve this host name.
grep -q "[[:space:]]$(hostname)\$" /etc/hosts || echo "127.0.1.1 $(hostname)" >> /etc/hosts
# LTTng: a session daemon of the chroot (its sockets are under the chroot
# /run), stopped at the end. The tests start one only when pgrep finds
# none, and pgrep sees the host daemon, which is out of reach from here.
lttng-sessiond --daemonize
trap "kill \$(cat /run/lttng/lttng-sessiond.pid) 2>/dev/null || true" EXIT

{
    echo "debian $(cat /etc/debian_version)"
    echo "otp $(erl -noshell -eval "io:format(\"~s\", [erlang:system_info(otp_release)]), halt().") ($(dpkg-query -W -f "\${Version}" erlang-base))"
    elixir --version | tail -1
    echo "rebar3 $(dpkg-query -W -f "\${Version}" rebar3)"
    rustc --version
    cargo --version
    echo "bpftrace $(bpftrace --version | sed "s/^bpftrace //")"
    gdb --version | head -1
    echo "perf $(perf version 2>&1 | sed "s/^perf version //")"
    dpkg-query -W -f "rabbitmq-server \${Version}\n" rabbitmq-server 2>/dev/null || true
} | tee versions.txt
case "$(rustc --version)" in "$RUST"*) ;; *) echo "$DIST: expected $RUST" >&2; exit 1 ;; esac
sh native/build-nif.sh release
cargo test --release --locked --ignore-rust-version --quiet
# No warning on this OTP and Elixir: the test profile compiles with
# warnings_as_errors (rebar.config).
rebar3 compile
rebar3 as test compile
MIX_ENV=test mix compile --warnings-as-errors
# A node firing user_trace__i4s4 with four strings (arg6 to arg9).
erl -noshell -pa _build/default/lib/dtrace/ebin -eval "
    {ok, _} = application:ensure_all_started(dtrace),
    false = dtrace:p(0),
    file:write_file(\"node.pid\", os:getpid()),
    Loop = fun L() -> dtrace:p(1, 2, 3, 4, \"s-one\", \"s-two\", \"s-three\", \"s-four\"), timer:sleep(5), L() end,
    Loop()." &
node=$!
for _ in $(seq 100); do [ -s node.pid ] && break; sleep 0.1; done
# bpftrace before 0.24 refuses arg6 and later on x86_64 ("x86_64 does not
# support arg6"); priv/bin/dtrace-bpftrace reads them (the register of argument
# k), and leaves a newer bpftrace to read them itself.
probe="usdt:$PWD/priv/dtrace_nif.so:erlang:user_trace__i4s4
    { printf(\"%ld %s %s %s %s\\n\", arg5, str(arg6), str(arg7), str(arg8), str(arg9)); exit(); }"
tools="priv/bin/dtrace-bpftrace"
[ "$DIST" = sid ] && tools="$tools bpftrace"
for tool in $tools; do
    out=$(timeout 60 $tool -p "$(cat node.pid)" -e "$probe" 2>&1) || true
    echo "$out"
    echo "$out" | grep -q "^4 s-one s-two s-three s-four$" ||
        { kill "$node"; echo "$DIST: $tool did not read arg6..arg9" >&2; exit 1; }
done
kill "$node"
make python-check
MIX_ENV=test mix test --warnings-as-errors
sh scripts/ct.sh $SUITES
' "$dist" "$work/dtrace"
