#!/bin/sh
# Checks that a built NIF's SDT notes (provider erlang) are the catalogue's
# for ARCH: each probe's name and argument specs (argument k in one fixed
# register). Used by make dist (scripts/dist.sh) and make check-aarch64.
#   scripts/check-notes.sh LIBRARY ARCH      ARCH: x86_64, aarch64
set -eu
so=$1
arch=$2
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo run --quiet --release -p dtrace_catalogue -- --arch "$arch" notes | sort > "$work/want"
readelf -n "$so" | awk '/Provider: erlang/ { p = 1; next } /Provider:/ { p = 0 }
    p && /Name:/ { name = $2 } p && /Arguments:/ { $1 = ""; print name $0 }' | sort > "$work/have"
if ! diff -u "$work/want" "$work/have" >&2; then
    echo "check-notes: the SDT notes of $so differ from the catalogue's for $arch" >&2
    exit 1
fi
echo "check-notes: $(wc -l < "$work/have") notes of $so match the catalogue ($arch)"
