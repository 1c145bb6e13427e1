#!/bin/sh
# Builds the NIF with cargo and installs it as priv/dtrace_nif.so (the
# library of the private module dtrace_nif), with the probe catalogue
# build.rs generated as priv/dtrace_probes.json and the LTTng-UST provider
# package priv/libdtrace_lttng_tp.so (when built); installs the tracer
# modules' library (native/tracer_nif) once per module, named after it:
# priv/tracer/dtrace_tracer.so and priv/compat/dyntrace.so; and compiles the
# dyntrace compatibility module to priv/compat/dyntrace.beam (kept out of
# ebin: see src/api/dtrace_compat.erl).
# Used by rebar3 (pre_hooks), mix (the compiler in mix.exs) and make, so a
# project that depends on dtrace needs only cargo, not rustler's hex package,
# or, without cargo, no Rust at all:
#   native/build-nif.sh [release|debug]     (default: release)
# Which way (README, "Install"):
#   DTRACE_NIF_BUILD=1        build with cargo (an error without it)
#   DTRACE_NIF_PRECOMPILED=1  install the precompiled objects `make dist`
#                             made, from DTRACE_NIF_URL, checked against
#                             checksum-dtrace_nif.exs (native/precompiled.escript)
#   neither                   cargo when it is on the PATH, else precompiled
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
# From the checkout, so that cargo reads its .cargo/config.toml (frame
# pointers) whatever directory rebar3 or mix runs this from.
cd "$here"
profile=${1:-release}
if [ "${DTRACE_NIF_BUILD:-}" = 1 ] && [ "${DTRACE_NIF_PRECOMPILED:-}" = 1 ]; then
    echo "dtrace: DTRACE_NIF_BUILD=1 and DTRACE_NIF_PRECOMPILED=1 contradict each other; set one" >&2
    exit 1
fi
# The dyntrace module, whichever way the objects come.
mkdir -p "$here/priv/compat"
# What earlier builds installed under other names (compat's library; the
# library of dtrace, the tracer module before dtrace_tracer).
rm -f "$here/priv/compat/dyntrace_nif.so" "$here/priv/tracer/dtrace.so"
erlc -o "$here/priv/compat" "$here/compat/dyntrace.erl"
if [ "${DTRACE_NIF_BUILD:-}" != 1 ] &&
    { [ "${DTRACE_NIF_PRECOMPILED:-}" = 1 ] || ! command -v cargo >/dev/null 2>&1; }; then
    # rebar3's hooks name the OTP it runs on; mix's has it on the PATH.
    escript=${ERLANG_ROOT_DIR:+$ERLANG_ROOT_DIR/bin/}escript
    exec "$escript" "$here/native/precompiled.escript" install
fi
command -v cargo >/dev/null 2>&1 || {
    echo "dtrace: DTRACE_NIF_BUILD=1 but cargo is not on the PATH; install Rust (https://rustup.rs)" >&2
    exit 1
}
flag=; [ "$profile" = release ] && flag=--release
# A local build replaces precompiled objects: nothing says they are there.
rm -f "$here/priv/precompiled.txt"
# The JSON messages name build.rs's output directory, where the catalogue is.
# --ignore-rust-version: rustler 0.39 declares Rust 1.91, but what the
# crates use of it builds with 1.85, Debian 13's (make test-trixie proves it).
messages=$(cargo build $flag --quiet --ignore-rust-version --message-format=json-render-diagnostics \
    --manifest-path "$here/Cargo.toml" -p dtrace_nif -p tracer_nif)
out_dir=$(printf '%s\n' "$messages" | grep '"reason":"build-script-executed"' | grep 'dtrace_nif' |
    sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -1)
target=${CARGO_TARGET_DIR:-$here/target}
case "$target" in /*) ;; *) target=$here/$target ;; esac
mkdir -p "$here/priv/tracer"
if [ -z "$out_dir" ] || [ ! -f "$out_dir/dtrace_probes.json" ]; then
    echo "dtrace: cargo reported no catalogue (dtrace_probes.json) for dtrace_nif" >&2
    exit 1
fi
cp "$out_dir/dtrace_probes.json" "$here/priv/dtrace_probes.json"
cp "$out_dir/dtrace_probes.eterm" "$here/priv/dtrace_probes.eterm"
# The LTTng-UST provider package, when build.rs could build it (the NIF
# loads it from next to itself; without it the LTTng sink is off).
if [ -f "$out_dir/libdtrace_lttng_tp.so" ]; then
    cp "$out_dir/libdtrace_lttng_tp.so" "$here/priv/.libdtrace_lttng_tp.so.tmp"
    mv -f "$here/priv/.libdtrace_lttng_tp.so.tmp" "$here/priv/libdtrace_lttng_tp.so"
else
    rm -f "$here/priv/libdtrace_lttng_tp.so"
fi
for lib in libdtrace_nif.so libdtrace_nif.dylib; do
    if [ -f "$target/$profile/$lib" ]; then
        # Copy to a temporary name and rename, so a running VM that has the old
        # library mapped keeps a consistent file.
        install_as() {
            cp "$1" "$2.tmp"
            mv -f "$2.tmp" "$2"
        }
        install_as "$target/$profile/$lib" "$here/priv/dtrace_nif.so"
        tracer=$target/$profile/$(echo "$lib" | sed 's/dtrace_nif/tracer_nif/')
        install_as "$tracer" "$here/priv/tracer/dtrace_tracer.so"
        install_as "$tracer" "$here/priv/compat/dyntrace.so"
        exit 0
    fi
done
echo "dtrace: cargo built no libdtrace_nif in $target/$profile" >&2
exit 1
