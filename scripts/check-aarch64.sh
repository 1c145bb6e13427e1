#!/bin/sh
# Cross-builds the NIF for aarch64 Linux and checks that its SDT notes are
# the catalogue's for aarch64 (argument k in register xk, or wk for a
# 32-bit argument) and that its text segment's file offset equals its
# address. Needs the rustup target aarch64-unknown-linux-gnu and Debian's
# gcc-aarch64-linux-gnu (installed here if missing). Not part of make
# test: CI machines may not reach rustup's servers.
set -eu
cd "$(dirname "$0")/.."
if ! rustup target list --installed 2>/dev/null | grep -q '^aarch64-unknown-linux-gnu$'; then
    rustup target add aarch64-unknown-linux-gnu
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo build --release --quiet --target aarch64-unknown-linux-gnu -p dtrace_nif --lib
so=target/aarch64-unknown-linux-gnu/release/libdtrace_nif.so
notes=$(sh scripts/check-notes.sh "$so" aarch64) || exit 1
readelf -lW "$so" | awk '$1 == "LOAD" && / E / { n++; off = $2; va = $3; sub(/^0x0*/, "", off); sub(/^0x0*/, "", va); if (off != va) bad = 1 }
    END { exit bad || n == 0 }' || {
    echo "check-aarch64: an executable segment's file offset differs from its address" >&2
    exit 1
}
echo "$notes; text offset = address"
