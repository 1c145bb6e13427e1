#!/bin/sh
# make kit: the operators' kit, one archive per target, for a host with
# nothing built (docs/operators.md, step 0): unpacked, priv/bin/dtrace-attach
# loads the library into a running node with the host's escript or the
# node's own, and the tools and tracer scripts run with bpftrace and
# Python. No Erlang build, no Rust.
#
#   scripts/kit.sh [-o DIR] [TARGET...]
#
# TARGET: x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu (default:
# both; aarch64 as scripts/dist.sh builds it). Writes to DIR (default dist/)
# dtrace-kit-VSN-TARGET.tar.gz and its SHA-256, .tar.gz.sha256 (sha256sum's
# format: `sha256sum -c` checks it). Each holds dtrace-kit-VSN-TARGET/:
#   kit.txt               what it is, and which beams serve which OTP
#   priv/                 the tools, tracer scripts and Python (priv/ of the
#                         checkout: its tracked files)
#   lib/otpNN/dtrace-VSN/ the application, its beams compiled by OTP NN:
#                         ebin/, and priv/ with the tools and the objects
#                         (NIF, tracer modules' library, LTTng provider,
#                         catalogue) and compat/dyntrace.beam
# The files common to the sets are hard links (stored once).
#
# The objects: scripts/dist.sh's build for TARGET, unpacked by
# native/precompiled.escript (the layout of an install). The beams: the
# sets of SETS below, each compiled with erlc from src/ and compat/ (as
# rebar3 compiles them: debug_info) by its OTP, with the .app rebar3 writes.
# Which sets: found by loading every beam of each OTP's compiler on each
# OTP (erlang:prepare_loading/2), OTP 25, 27 and 29:
#   compiled by 25: load on 25 and 27; on 29, 3 of 24 refused ("please
#                   re-compile this module with an Erlang/OTP 29 compiler");
#   compiled by 27: load on 27 and 29; on 25, 10 of 24 refused;
#   compiled by 29: load on 29 only.
# So two sets: OTP 25's for 25 and 26, 27's for 27 to 29 (28, not run here,
# loads 27's: a loader takes the two majors before its own, and every
# instruction 27 emits is one 29 still takes, so 28 has it too).
# dtrace-attach picks the set compiled by the newest OTP no newer than the
# node's whose beams load (its header).
#
# Needs: scripts/dist.sh's (cargo; for aarch64 its cross toolchain), this
# host's OTP 25 (Debian 12's) and, as root, the trixie-userland root of
# scripts/guest.sh (OTP 27: built there if not cached).
set -eu
export LC_ALL=C
cd "$(dirname "$0")/.."
top=$(pwd)
out=dist
while getopts o: opt; do
    case $opt in
        o) out=$OPTARG ;;
        *) sed -n '8p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
die() { echo "kit: $*" >&2; exit 1; }
# NN|WHERE: the sets; WHERE is `host` (this host's erlc) or a root of
# scripts/guest.sh (its erlc, in a chroot).
SETS='25|host 27|trixie-userland'

vsn=$(sed -n 's/.*{vsn, *"\([^"]*\)"}.*/\1/p' src/dtrace.app.src)
[ -n "$vsn" ] || die "no version in src/dtrace.app.src"
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Under the checkout: a guest root's chroot shares it.
mkdir -p _build
work=$(mktemp -d "$top/_build/kit.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The objects of every target.
sh scripts/dist.sh -o "$work/dist" -c "$work/dist/checksums" "$@" >&2

# The beams of each set: ebin/ (with the .app) and compat/dyntrace.beam.
compile() {
    # $1: the set's directory; $1/otp: the OTP and compiler versions.
    mkdir -p "$1/ebin" "$1/compat"
    # shellcheck disable=SC2046 # the sources, one word each
    erlc -o "$1/ebin" +debug_info -I src/api $(find src -name '*.erl' | sort)
    erlc -o "$1/compat" compat/dyntrace.erl
    erl -noshell -eval '
        [Dir] = init:get_plain_arguments(),
        {ok, [{application, dtrace, Keys}]} = file:consult("src/dtrace.app.src"),
        Mods = lists:sort([list_to_atom(filename:basename(F, ".beam"))
                           || F <- filelib:wildcard(filename:join(Dir, "ebin/*.beam"))]),
        App = {application, dtrace, lists:keystore(modules, 1, Keys, {modules, Mods})},
        ok = file:write_file(filename:join(Dir, "ebin/dtrace.app"), io_lib:format("~p.~n", [App])),
        Rel = erlang:system_info(otp_release),
        {ok, Otp} = file:read_file(filename:join([code:root_dir(), "releases", Rel, "OTP_VERSION"])),
        "compiler-" ++ Compiler = filename:basename(code:lib_dir(compiler)),
        ok = file:write_file(filename:join(Dir, "otp"), [string:trim(Otp), " (compiler ", Compiler, ")"]),
        halt().' -extra "$1"
}
for set in $SETS; do
    n=${set%%|*}
    where=${set#*|}
    dir=$work/beams/otp$n
    if [ "$where" = host ]; then
        have=$(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().')
        [ "$have" = "$n" ] || die "OTP $n's beams are compiled by this host's OTP, which is $have (Debian 12 has 25)"
        compile "$dir"
    else
        # The chroot runs this script's compile() with that root's OTP.
        sed -n '/^compile() {$/,/^}$/p' "$0" > "$work/compile.sh"
        echo 'compile "$1"' >> "$work/compile.sh"
        sh scripts/guest.sh chroot "$where" -- sh -eu "$work/compile.sh" "$dir" >&2
    fi
    echo "kit: OTP $n's beams: $(cat "$dir/otp")" >&2
done

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit, with local changes"
for target in "$@"; do
    name=dtrace-kit-$vsn-$target
    kit=$work/$name
    mkdir -p "$kit"
    git ls-files -z priv | (cd "$top" && xargs -0 tar -cf -) | tar -C "$kit" -xf -
    first=
    for set in $SETS; do
        n=${set%%|*}
        app=$kit/lib/otp$n/dtrace-$vsn
        mkdir -p "$app"
        cp -R "$work/beams/otp$n/ebin" "$app/ebin"
        if [ -z "$first" ]; then
            # The tools, linked; the objects, installed.
            cp -Rl "$kit/priv" "$app/priv"
            escript native/precompiled.escript unpack "$work/dist" "$target" "$app/priv"
            first=$app
        else
            cp -Rl "$first/priv" "$app/priv"
            rm "$app/priv/compat/dyntrace.beam"
        fi
        cp "$work/beams/otp$n/compat/dyntrace.beam" "$app/priv/compat/dyntrace.beam"
    done
    {
        echo "dtrace $vsn for $target: the operators' kit (make kit, commit $commit)."
        echo "Start: docs/operators.md, step 0. priv/bin/dtrace-attach loads the library into a node"
        echo "from lib/otpNN/dtrace-$vsn, the beams compiled by OTP NN:"
        for set in $SETS; do
            n=${set%%|*}
            echo "  lib/otp$n: OTP $(cat "$work/beams/otp$n/otp")"
        done
        echo "OTP 25's beams serve nodes on OTP 25 and 26, 27's nodes on 27 to 29 (scripts/kit.sh says why)."
    } > "$kit/kit.txt"
    tar -C "$work" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - "$name" |
        gzip -9n > "$out/.$name.tar.gz.tmp"
    mv -f "$out/.$name.tar.gz.tmp" "$out/$name.tar.gz"
    (cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
    echo "kit: $out/$name.tar.gz ($(du -k "$out/$name.tar.gz" | cut -f1) kB), sha256 $(cut -d' ' -f1 "$out/$name.tar.gz.sha256")"
done
