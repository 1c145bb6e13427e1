#!/bin/sh
# Builds the NIF with cargo and installs it as priv/dtrace_nif.so, with the
# probe catalogue build.rs generated as priv/dtrace_probes.json and the
# LTTng-UST provider package priv/libdtrace_lttng_tp.so (when built), and
# compiles the dyntrace compatibility module to priv/compat/dyntrace.beam
# with its NIF library priv/compat/dyntrace_nif.so (kept out of ebin: see
# src/dtrace_compat.erl).
# Used by rebar3 (pre_hooks), mix (the compiler in mix.exs) and make, so a
# project that depends on dtrace needs only cargo, not rustler's hex package.
#   native/build-nif.sh [release|debug]     (default: release)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
profile=${1:-release}
command -v cargo >/dev/null 2>&1 || {
    echo "dtrace: cargo not found; install Rust (https://rustup.rs) to build the NIF" >&2
    exit 1
}
flag=; [ "$profile" = release ] && flag=--release
# The JSON messages name build.rs's output directory, where the catalogue is.
messages=$(cargo build $flag --quiet --message-format=json-render-diagnostics \
    --manifest-path "$here/Cargo.toml" -p dtrace_nif -p dyntrace_nif)
out_dir=$(printf '%s\n' "$messages" | grep '"reason":"build-script-executed"' | grep 'dtrace_nif' |
    sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -1)
target=${CARGO_TARGET_DIR:-$here/target}
case "$target" in /*) ;; *) target=$here/$target ;; esac
mkdir -p "$here/priv/compat"
erlc -o "$here/priv/compat" "$here/compat/dyntrace.erl"
if [ -z "$out_dir" ] || [ ! -f "$out_dir/dtrace_probes.json" ]; then
    echo "dtrace: cargo reported no catalogue (dtrace_probes.json) for dtrace_nif" >&2
    exit 1
fi
cp "$out_dir/dtrace_probes.json" "$here/priv/dtrace_probes.json"
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
        cp "$target/$profile/$lib" "$here/priv/.dtrace_nif.so.tmp"
        mv -f "$here/priv/.dtrace_nif.so.tmp" "$here/priv/dtrace_nif.so"
        compat=$target/$profile/$(echo "$lib" | sed 's/dtrace_nif/dyntrace_nif/')
        cp "$compat" "$here/priv/compat/.dyntrace_nif.so.tmp"
        mv -f "$here/priv/compat/.dyntrace_nif.so.tmp" "$here/priv/compat/dyntrace_nif.so"
        exit 0
    fi
done
echo "dtrace: cargo built no libdtrace_nif in $target/$profile" >&2
exit 1
