#!/bin/sh
# Builds the second OTP the suite runs on: OTP 27.3.4.1, Elixir 1.18.3 and
# PropEr 1.5.0, from Debian 13 (trixie)'s source tarballs, into a cache
# outside the checkout, and reuses that cache when it is complete. Prints the
# directory to put first on PATH (it holds erl, erlc, escript, elixir and
# mix). rebar3 stays Debian's (3.19, an escript: it runs on OTP 27 too;
# trixie's rebar3 source tarball is not served here).
#   scripts/otp27.sh              build if needed, print the bin directory
# Cache: $DTRACE_TOOLCHAINS (default /var/cache/dtrace-toolchains as root,
# else ~/.cache/dtrace-toolchains), readable by every user: the suites start
# nodes as a user of their own too (the flight recorder without root). About
# 13 minutes on 2 cores the first time, nothing after that.
#
# Why from source: no Debian 12 package carries OTP 27, hex.pm and GitHub
# are not reachable from the machines this project is built on, and Debian's
# archive is. Only the upstream ("orig") tarballs are needed; they are
# checked against the SHA256 sums in trixie's Sources index.
set -eu
otp_vsn=27.3.4.1
elixir_vsn=1.18.3
proper_vsn=1.5.0
if [ "$(id -u)" -eq 0 ]; then
    default_cache=/var/cache/dtrace-toolchains
else
    default_cache=$HOME/.cache/dtrace-toolchains
fi
cache=${DTRACE_TOOLCHAINS:-$default_cache}
prefix=$cache/otp-$otp_vsn
bin=$prefix/bin
log() { echo "otp27: $*" >&2; }

if [ -f "$prefix/.complete" ]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache/src"
# Build tools and the C libraries OTP's crypto and the shell need.
missing=
for pkg in build-essential libncurses-dev libssl-dev xz-utils curl; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    log "installing$missing"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
fi

# fetch SOURCE-PACKAGE: its orig tarball from trixie, downloaded once into
# $cache/src and checked against trixie's SHA256 (scripts/otp-source.sh);
# prints its path.
here=$(cd "$(dirname "$0")" && pwd)
fetch() {
    DTRACE_TOOLCHAINS=$cache "$here/otp-source.sh" "$1"
}
# unpack TARBALL DIR: a fresh copy of the tarball's top directory at DIR.
unpack() {
    rm -rf "$2" "$2.tmp"
    mkdir -p "$2.tmp"
    tar -xf "$1" -C "$2.tmp"
    mv "$2.tmp"/* "$2"
    rmdir "$2.tmp"
}

build=$cache/build
mkdir -p "$build"
if [ ! -x "$prefix/bin/erl" ]; then
    tarball=$(fetch erlang)
    log "building OTP $otp_vsn (about 12 minutes on 2 cores)"
    unpack "$tarball" "$build/otp"
    cd "$build/otp"
    ./configure --prefix="$prefix" --without-javac --without-wx --without-odbc \
        --without-megaco --without-diameter --without-et --without-observer \
        --without-debugger --enable-jit >"$build/otp-configure.log" 2>&1 ||
        { tail -30 "$build/otp-configure.log" >&2; exit 1; }
    make -j"$(nproc)" >"$build/otp-make.log" 2>&1 || { tail -40 "$build/otp-make.log" >&2; exit 1; }
    # The dfsg tarball leaves out common_test's minified jQuery files, which
    # make install still copies; empty ones are enough for CT's HTML logs.
    touch lib/common_test/priv/jquery-latest.js lib/common_test/priv/jquery.tablesorter.min.js
    make install >"$build/otp-install.log" 2>&1 || { tail -40 "$build/otp-install.log" >&2; exit 1; }
    cd "$cache"
    rm -rf "$build/otp"
fi
PATH=$bin:$PATH
export PATH

if [ ! -x "$prefix/elixir/bin/elixir" ]; then
    tarball=$(fetch elixir-lang)
    log "building Elixir $elixir_vsn"
    unpack "$tarball" "$prefix/elixir"
    (cd "$prefix/elixir" && make compile >"$build/elixir-make.log" 2>&1) ||
        { tail -30 "$build/elixir-make.log" >&2; exit 1; }
fi
for tool in elixir elixirc iex mix; do
    ln -sf "../elixir/bin/$tool" "$bin/$tool"
done

# PropEr, compiled by OTP 27's erlc into OTP 27's own lib directory, so that
# -include_lib("proper/include/proper.hrl") and code:lib_dir(proper) find it
# as they find Debian's erlang-proper on OTP 25.
lib=$prefix/lib/erlang/lib/proper-$proper_vsn
if [ ! -f "$lib/ebin/proper.app" ]; then
    tarball=$(fetch erlang-proper)
    log "building PropEr $proper_vsn"
    unpack "$tarball" "$build/proper"
    cd "$build/proper"
    mkdir -p ebin
    # Parse transforms and behaviours first: the rest are compiled with them.
    for m in vararg proper_target proper_unused_imports_remover proper_typeserver; do
        [ -f "src/$m.erl" ] && erlc -I include -o ebin -pa ebin "src/$m.erl"
    done
    erlc -I include -o ebin -pa ebin src/*.erl
    sed "s/{vsn, *[^}]*}/{vsn, \"$proper_vsn\"}/" src/proper.app.src > ebin/proper.app
    rm -rf "$lib"
    mkdir -p "$lib"
    cp -r ebin include "$lib/"
    cd "$cache"
    rm -rf "$build/proper"
fi

chmod -R a+rX "$cache"
touch "$prefix/.complete"
log "ready: $bin"
echo "$bin"
