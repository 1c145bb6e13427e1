#!/bin/sh
# Builds the test artefact the robustness suites need, before Common Test
# runs (scripts/ct.sh calls this): the library with the cargo feature
# test-hooks (dtrace_nif:test_panic/0, test_allocations/0,
# test_dof_force_active/0), laid out as an
# application directory _build/test_hooks/dtrace (under $REBAR_BASE_DIR
# when set: ebin from that build, priv with that library). Under _build so that bpftrace can name the
# path (CT's log directories contain an @, which bpftrace reads as a map).
# cargo rebuilds only what changed.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
base=${REBAR_BASE_DIR:-$root/_build}
dest=$base/test_hooks
app=$dest/dtrace
(cd "$root" && ${REBAR3:-rebar3} compile >/dev/null)
cargo build --release --quiet --ignore-rust-version -p dtrace_nif -p tracer_nif --features dtrace_nif/test-hooks \
    --manifest-path "$root/Cargo.toml" --target-dir "$dest/target"
rm -rf "$app"
mkdir -p "$app/ebin" "$app/priv/tracer"
cp "$base"/default/lib/dtrace/ebin/*.beam "$base"/default/lib/dtrace/ebin/dtrace.app "$app/ebin/"
# dtrace_nif with the test hooks' functions (only with TEST): the VM loads
# a library only if the module has a function for each of its NIFs.
erlc -DTEST +debug_info -o "$app/ebin" "$root/src/api/dtrace_nif.erl"
cp "$dest/target/release/libdtrace_nif.so" "$app/priv/dtrace_nif.so"
cp "$dest/target/release/libtracer_nif.so" "$app/priv/tracer/dtrace_tracer.so"
