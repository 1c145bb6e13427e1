#!/bin/sh
# make dist: the precompiled artefacts of every shared object the library
# loads, and their checksum file, for builds without Rust
# (native/precompiled.escript installs them; README, "Install").
#
#   scripts/dist.sh [-o DIR] [-c FILE] [TARGET...]
#
# TARGET: x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu (default:
# both). For each, cargo builds dtrace_nif and tracer_nif for TARGET
# (aarch64 with Debian's cross gcc and liblttng-ust-dev:arm64, installed
# here when missing, which adds dpkg's arm64 architecture) and this writes
# to DIR (default dist/) three archives, named as rustler_precompiled names
# them (lib<NAME>-v<VSN>-nif-<NIF>-<TARGET>.so.tar.gz, one member: the
# library under that name without .tar.gz):
#   libdtrace_nif      the NIF, with the catalogue build.rs wrote
#                      (dtrace_probes.json, dtrace_probes.eterm) beside it
#   libtracer_nif      the tracer modules' library (priv/tracer/dtrace_tracer.so,
#                      priv/compat/dyntrace.so)
#   libdtrace_lttng_tp the LTTng-UST provider package
# VSN is src/dtrace.app.src's, NIF the rustler feature of
# native/dtrace_nif/Cargo.toml (nif_version_2_15: 2.15, which OTP 22 and
# later load). Then FILE (default checksum-dtrace_nif.exs, committed) is
# rewritten with the SHA-256 of every archive in DIR, in
# rustler_precompiled's format.
#
# Each library is checked before it is packed: the SDT notes are the
# catalogue's for TARGET, and no symbol needs a glibc newer than 2.34
# (Debian 12 has 2.36, RHEL 9 and Ubuntu 22.04 2.34). The archives are
# reproducible from the same libraries (sorted, mtime 0, uid 0, gzip -n);
# the libraries themselves embed the paths of cargo's registry, so a build
# on another machine gives other sums: publish the archives of the run that
# wrote FILE (CONTRIBUTING.md, "Publishing").
set -eu
export LC_ALL=C
cd "$(dirname "$0")/.."
top=$(pwd)
out=dist
sums=checksum-dtrace_nif.exs
while getopts o:c: opt; do
    case $opt in
        o) out=$OPTARG ;;
        c) sums=$OPTARG ;;
        *) sed -n '6p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
die() { echo "dist: $*" >&2; exit 1; }

vsn=$(sed -n 's/.*{vsn, *"\([^"]*\)"}.*/\1/p' src/dtrace.app.src)
nif=$(sed -n 's/.*"nif_version_\([0-9]*\)_\([0-9]*\)".*/\1.\2/p' native/dtrace_nif/Cargo.toml | head -1)
[ -n "$vsn" ] && [ -n "$nif" ] || die "no version in src/dtrace.app.src or no nif_version_* feature in native/dtrace_nif/Cargo.toml"
command -v cargo >/dev/null 2>&1 || die "needs cargo (https://rustup.rs)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

# The newest GLIBC_x.y a library's dynamic symbols need, as x.y.
glibc_needed() {
    readelf --dyn-syms -W "$1" | sed -n 's/.*@GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -t. -k1,1n -k2,2n -u | tail -1
}

# pack NAME FILE [EXTRA...]: the archive of NAME for this target.
pack() {
    name=lib$1-v$vsn-nif-$nif-$target.so
    file=$2
    shift 2
    rm -rf "$work/stage"
    mkdir "$work/stage"
    cp "$file" "$work/stage/$name"
    chmod 755 "$work/stage/$name"
    members=$name
    for extra in "$@"; do
        cp "$extra" "$work/stage/"
        chmod 644 "$work/stage/$(basename "$extra")"
        members="$members $(basename "$extra")"
    done
    # shellcheck disable=SC2086 # the members, one word each
    (cd "$work/stage" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        -cf - $members) | gzip -9n > "$out/.$name.tar.gz.tmp"
    mv -f "$out/.$name.tar.gz.tmp" "$out/$name.tar.gz"
    echo "dist: $out/$name.tar.gz"
}

for target in "$@"; do
    case $target in
        x86_64-unknown-linux-gnu) arch=x86_64 ;;
        aarch64-unknown-linux-gnu) arch=aarch64 ;;
        *) die "no precompiled target $target (x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu)" ;;
    esac
    if command -v rustup >/dev/null 2>&1 &&
        ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
        rustup target add "$target" >&2
    fi
    if [ "$arch" = aarch64 ] && [ "$(uname -m)" != aarch64 ]; then
        command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
        # The provider package links with arm64's liblttng-ust (multiarch).
        if ! dpkg-query -W -f '${Status}' liblttng-ust-dev:arm64 2>/dev/null | grep -q 'install ok installed'; then
            dpkg --add-architecture arm64
            apt-get update -qq >&2
            apt_install liblttng-ust-dev:arm64
        fi
        export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    fi
    # --ignore-rust-version: rustler 0.39 declares Rust 1.91, but what the
    # crates use of it builds with 1.85 (make test-trixie proves it).
    messages=$(cargo build --locked --release --ignore-rust-version --quiet --target "$target" \
        --message-format=json-render-diagnostics -p dtrace_nif -p tracer_nif)
    out_dir=$(printf '%s\n' "$messages" | grep '"reason":"build-script-executed"' | grep 'dtrace_nif' |
        sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -1)
    lib=${CARGO_TARGET_DIR:-$top/target}/$target/release
    [ -n "$out_dir" ] && [ -f "$out_dir/dtrace_probes.json" ] || die "$target: cargo reported no catalogue"
    [ -f "$out_dir/libdtrace_lttng_tp.so" ] ||
        die "$target: build.rs built no LTTng provider package (lttng-ust 2.13+ headers and library for $target?)"
    cp "$out_dir/dtrace_probes.json" "$out_dir/dtrace_probes.eterm" "$work/"
    for so in "$lib/libdtrace_nif.so" "$lib/libtracer_nif.so" "$out_dir/libdtrace_lttng_tp.so"; do
        need=$(glibc_needed "$so")
        case $need in
            2.[0-9]|2.[0-2][0-9]|2.3[0-4]|'') ;;
            *) die "$so needs glibc $need, newer than 2.34" ;;
        esac
    done
    sh scripts/check-notes.sh "$lib/libdtrace_nif.so" "$arch" >&2
    pack dtrace_nif "$lib/libdtrace_nif.so" "$work/dtrace_probes.json" "$work/dtrace_probes.eterm"
    pack tracer_nif "$lib/libtracer_nif.so"
    pack dtrace_lttng_tp "$out_dir/libdtrace_lttng_tp.so"
done

# The checksum file: rustler_precompiled's layout (its write_checksum!/2),
# one line per archive in DIR, sorted by name.
{
    echo '%{'
    for f in "$out"/*.so.tar.gz; do
        [ -f "$f" ] || continue
        printf '  "%s" => "sha256:%s",\n' "$(basename "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
    done
    echo '}'
} > "$work/sums"
mv -f "$work/sums" "$sums"
echo "dist: $sums ($(grep -c '=>' "$sums") archives)"
