#!/bin/sh
# Builds the NIF with cargo and installs it as priv/dtrace_nif.so, and
# compiles the dyntrace compatibility module to priv/compat/dyntrace.beam
# (kept out of ebin: see src/dtrace_compat.erl).
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
cargo build $flag --quiet --manifest-path "$here/Cargo.toml" -p dtrace_nif
target=${CARGO_TARGET_DIR:-$here/target}
case "$target" in /*) ;; *) target=$here/$target ;; esac
mkdir -p "$here/priv/compat"
erlc -o "$here/priv/compat" "$here/compat/dyntrace.erl"
for lib in libdtrace_nif.so libdtrace_nif.dylib; do
    if [ -f "$target/$profile/$lib" ]; then
        mkdir -p "$here/priv"
        # Copy to a temporary name and rename, so a running VM that has the old
        # library mapped keeps a consistent file.
        cp "$target/$profile/$lib" "$here/priv/.dtrace_nif.so.tmp"
        mv -f "$here/priv/.dtrace_nif.so.tmp" "$here/priv/dtrace_nif.so"
        exit 0
    fi
done
echo "dtrace: cargo built no libdtrace_nif in $target/$profile" >&2
exit 1
