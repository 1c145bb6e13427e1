#!/bin/sh
# Sets up what the viewer tests need, into a cache outside the checkout, and
# reuses that cache when it is complete: the trace files the tools write
# (Chrome Trace Event JSON, folded stacks, Perfetto protobuf) are opened in a
# real viewer, offline, not just checked to exist (test/support/
# dtrace_test_viewer.erl, test/support/dtrace_viewer.py).
#   - Debian's chromium, run headless by test/support/dtrace_viewer.py over
#     the DevTools protocol (python3-websocket, from Debian too), with an
#     emoji font for speedscope's toolbar (a picture without it shows boxes);
#   - speedscope, the flame-graph viewer, from its npm package: the package
#     carries the built static site (dist/release/), which the tests serve on
#     127.0.0.1; npm is used for `npm pack' only, with the registry npm's own
#     configuration names, and the tarball is checked against its pinned
#     SHA-512 (the registry's "integrity" for it, in hex);
#   - a Python venv with Perfetto's Python package (perfetto, its protobuf
#     classes for the trace format) and the protobuf runtime it works with,
#     both pinned. It is made from Debian's python3 with its system packages
#     visible, so that its python also has python3-websocket: it runs
#     dtrace_viewer.py as well.
# Prints the paths as shell assignments, for eval:
#   eval "$(scripts/viewers.sh)"    SPEEDSCOPE_DIR, VIEWER_PYTHON, CHROMIUM,
#                                   DTRACE_VIEWER (the script to run)
# Cache: $DTRACE_VIEWERS_DIR (default /var/cache/dtrace-viewers). As root
# (apt-get); once the cache is complete, any user may run it to print the
# paths. The first run installs Debian packages (chromium is the large one);
# later runs only check and print.
set -eu
speedscope_vsn=1.25.0
speedscope_sha512=7297fd1d64d97f58a32d7049ae4f3b55eff9e2d9d8c7aae57f48144e1be7de8a24ea1eb784b5d539088c7f8e0f4fe5e8579d3770f7ef7e24f980fe6fa23a7a02
# perfetto 0.59.1's generated classes are protobuf 6.31.1 code, which the
# 7.x runtime still loads (checked: perfetto_trace_pb2 and TraceProtoBuilder).
perfetto_vsn=0.59.1
protobuf_vsn=7.36.2
cache=${DTRACE_VIEWERS_DIR:-/var/cache/dtrace-viewers}
here=$(cd "$(dirname "$0")" && pwd)
site=$cache/speedscope-$speedscope_vsn
venv=$cache/venv
stamp=$cache/.complete-speedscope-$speedscope_vsn-perfetto-$perfetto_vsn-protobuf-$protobuf_vsn
log() { echo "viewers: $*" >&2; }

print_env() {
    echo "SPEEDSCOPE_DIR='$site'"
    echo "VIEWER_PYTHON='$venv/bin/python'"
    echo "CHROMIUM='$(command -v chromium)'"
    echo "DTRACE_VIEWER='$(dirname "$here")/test/support/dtrace_viewer.py'"
}

# Debian package -> how to tell it is there. npm only as a command: where
# Node.js comes from elsewhere (NodeSource's nodejs carries its own npm),
# Debian's npm would conflict with it.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=
for pkg in chromium python3-venv python3-websocket fonts-noto-color-emoji; do
    installed "$pkg" || missing="$missing $pkg"
done
command -v npm >/dev/null 2>&1 || missing="$missing npm"

complete() { [ -f "$stamp" ] && [ -f "$site/index.html" ] && [ -x "$venv/bin/python" ]; }
if [ -z "$missing" ] && complete; then
    print_env
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    if [ -n "$missing" ]; then
        log "missing packages:$missing; run as root: $0"
    else
        log "$cache is not complete; run as root: $0"
    fi
    exit 1
fi
if [ -n "$missing" ]; then
    log "installing$missing"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
fi
mkdir -p "$cache"

# speedscope's static site: the package's dist/release/ (index.html, the JS
# bundle, CSS, fonts); no server code is needed.
if [ ! -f "$site/index.html" ]; then
    log "fetching speedscope $speedscope_vsn (npm pack)"
    tmp=$(mktemp -d "$cache/.pack.XXXXXX")
    (cd "$tmp" && npm pack --silent "speedscope@$speedscope_vsn" >/dev/null)
    tarball=$tmp/speedscope-$speedscope_vsn.tgz
    sum=$(sha512sum "$tarball" | cut -d' ' -f1)
    if [ "$sum" != "$speedscope_sha512" ]; then
        log "speedscope-$speedscope_vsn.tgz: SHA-512 $sum, expected $speedscope_sha512"
        rm -rf "$tmp"
        exit 1
    fi
    tar -xzf "$tarball" -C "$tmp"
    [ -f "$tmp/package/dist/release/index.html" ] ||
        { log "speedscope $speedscope_vsn: no dist/release/index.html in the package"; rm -rf "$tmp"; exit 1; }
    rm -rf "$site"
    mv "$tmp/package/dist/release" "$site"
    rm -rf "$tmp"
fi

# The venv, from Debian's python3 (not whichever python3 is first on PATH):
# python3-websocket is installed for it.
if ! complete; then
    if [ ! -x "$venv/bin/python" ]; then
        log "making $venv"
        /usr/bin/python3 -m venv --system-site-packages "$venv"
    fi
    log "installing perfetto==$perfetto_vsn protobuf==$protobuf_vsn"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "perfetto==$perfetto_vsn" "protobuf==$protobuf_vsn" >&2
    "$venv/bin/python" -c '
import websocket
from perfetto.protos.perfetto.trace import perfetto_trace_pb2
from perfetto.trace_builder.proto_builder import TraceProtoBuilder
TraceProtoBuilder().serialize()
' || { log "the venv cannot import websocket and perfetto"; exit 1; }
    chmod -R a+rX "$cache"
    rm -f "$cache"/.complete-*
    touch "$stamp"
    log "ready: $cache"
fi
print_env
