#!/bin/sh
# make test-trixie: the library built and tested with Debian 13's own
# packages, no VM: a chroot of the root trixie-userland (scripts/guest.sh;
# mmdebstrap from the Debian archive apt is configured with, cached in
# /var/cache/dtrace-guests) on this machine's kernel, holding Debian's OTP
# 27, Elixir 1.18, rebar3 3.24, cargo and rustc 1.85, bpftrace 0.23, gdb and
# perf. In it, from a copy of this checkout (tracked and new files):
#   - the versions, written to versions.txt in the copy;
#   - cargo build and cargo test with Debian's Rust (native/build-nif.sh);
#   - bpftrace 0.23 reading argument 6 to 9 of a user probe through
#     priv/dtrace-bpftrace (bpftrace before 0.24 refuses arg6 and later on
#     x86_64 itself);
#   - the Elixir layer's tests (mix test);
#   - the user-probe, VM-probe (with their shipped scripts) and run-time
#     provider suites (dtrace_tracer_SUITE, dtrace_vm_SUITE,
#     dtrace_vm_scripts_SUITE, dtrace_provider_SUITE), with CI=true: a
#     tracer missing there fails.
# Work and logs stay in $DTRACE_TRIXIE_WORK (default /var/tmp/dtrace-trixie;
# the copy, its _build with Common Test's logs), cargo's downloads in
# /var/cache/dtrace-toolchains/trixie-cargo. Needs root (chroot, bpftrace).
#   scripts/trixie.sh [SUITE...]          (default: the four suites)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
work=${DTRACE_TRIXIE_WORK:-/var/tmp/dtrace-trixie}
cargo_home=/var/cache/dtrace-toolchains/trixie-cargo
[ $# -gt 0 ] || set -- dtrace_tracer_SUITE dtrace_vm_SUITE dtrace_vm_scripts_SUITE dtrace_provider_SUITE
suites=$(printf 'test/%s,' "$@" | sed 's/,$//')

rm -rf "$work"
mkdir -p "$work/dtrace" "$cargo_home"
# The checkout's files as they are now, without build products.
(cd "$here" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -xf - -C "$work/dtrace"
# This machine's CA certificates, for cargo's downloads: a proxy's CA the
# chroot's own store lacks is among them where one is configured.
cainfo=
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$work/ca-certificates.crt"
    cainfo=$work/ca-certificates.crt
fi

# shellcheck disable=SC2016 # expanded in the chroot
exec "$here/scripts/guest.sh" chroot trixie-userland -s "$work" -s "$cargo_home" -- \
    env CARGO_HOME="$cargo_home" ${cainfo:+CARGO_HTTP_CAINFO="$cainfo"} CI=true SUITES="$suites" /bin/sh -eu -c '
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
} | tee versions.txt
case "$(rustc --version)" in "rustc 1.85."*) ;; *) echo "trixie: expected Debian 13 rustc 1.85" >&2; exit 1 ;; esac
sh native/build-nif.sh release
cargo test --release --locked --ignore-rust-version --quiet
rebar3 compile
# A node firing user_trace__i4s4 with four strings (arg6 to arg9).
erl -noshell -pa _build/default/lib/dtrace/ebin -eval "
    {ok, _} = application:ensure_all_started(dtrace),
    false = dtrace:p(0),
    file:write_file(\"node.pid\", os:getpid()),
    Loop = fun L() -> dtrace:p(1, 2, 3, 4, \"s-one\", \"s-two\", \"s-three\", \"s-four\"), timer:sleep(5), L() end,
    Loop()." &
node=$!
for _ in $(seq 100); do [ -s node.pid ] && break; sleep 0.1; done
# bpftrace 0.23 itself refuses arg6 and later on x86_64 ("x86_64 does not
# support arg6"); priv/dtrace-bpftrace reads them (the register of argument k).
out=$(timeout 60 priv/dtrace-bpftrace -p "$(cat node.pid)" -e "usdt:$PWD/priv/dtrace_nif.so:erlang:user_trace__i4s4
    { printf(\"%ld %s %s %s %s\\n\", arg5, str(arg6), str(arg7), str(arg8), str(arg9)); exit(); }" 2>&1) || true
kill "$node"
echo "$out"
echo "$out" | grep -q "^4 s-one s-two s-three s-four$" ||
    { echo "trixie: bpftrace 0.23 through priv/dtrace-bpftrace did not read arg6..arg9" >&2; exit 1; }
MIX_ENV=test mix test
sh scripts/ct.sh --suite "$SUITES"
' trixie "$work/dtrace"
