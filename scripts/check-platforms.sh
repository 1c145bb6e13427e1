#!/bin/sh
# cargo check and clippy of the NIF crates for the DTrace platforms this
# machine cannot run: illumos and FreeBSD (x86_64: SDT sites, and DOF handed
# to /dev/dtrace/helper with each system's request numbers, src/dof/helper.rs)
# and macOS (aarch64: no probe sites; ARCHITECTURE.md, "macOS", says why).
# Type-checks the code only those systems compile; links and runs nothing.
# Installs the rustup targets when missing (rustup reaches its servers).
set -eu
cd "$(dirname "$0")/.."
targets="x86_64-unknown-illumos x86_64-unknown-freebsd aarch64-apple-darwin"
installed=$(rustup target list --installed 2>/dev/null || true)
for t in $targets; do
    printf '%s\n' "$installed" | grep -qx "$t" || rustup target add "$t"
done
for t in $targets; do
    echo "check-platforms: $t"
    cargo check --release --quiet --target "$t" -p dtrace_nif -p tracer_nif
    cargo clippy --release --quiet --target "$t" --all-targets -p dtrace_nif -p tracer_nif -p dtrace_catalogue -- -D warnings
done
