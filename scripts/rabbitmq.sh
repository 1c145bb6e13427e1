#!/bin/sh
# Debian's RabbitMQ (rabbitmq-server, the real third-party application
# dtrace_rabbitmq_SUITE attaches to) and python3-pika (its AMQP load),
# unpacked into the toolchain cache rather than installed: installing the
# package would start a system broker on port 5672 on a developer's machine.
# The broker runs from there on the system's Erlang, which the package needs
# anyway (erlang-nox). Prints the unpacked root: its
# usr/lib/rabbitmq/bin/rabbitmq-server, and usr/lib/python3/dist-packages
# for PYTHONPATH.
#   scripts/rabbitmq.sh
# Cache: $DTRACE_TOOLCHAINS/rabbitmq (default /var/cache/dtrace-toolchains as
# root, else ~/.cache/dtrace-toolchains), reused while apt's candidate
# versions are the ones unpacked. The packages come through apt (its
# configured archive, its signatures): `apt-get download`. Where both
# packages are installed (the sid root of make test-sid), prints / instead:
# the installed broker, started the same way, by the suite, never as the
# system's service.
set -eu
installed() {
    dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}
if installed rabbitmq-server && installed python3-pika; then
    echo /
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    default_cache=/var/cache/dtrace-toolchains
else
    default_cache=$HOME/.cache/dtrace-toolchains
fi
cache=${DTRACE_TOOLCHAINS:-$default_cache}/rabbitmq
log() { echo "rabbitmq: $*" >&2; }

candidate() {
    apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" { print $2 }'
}
want="rabbitmq-server=$(candidate rabbitmq-server) python3-pika=$(candidate python3-pika)"
case $want in
    *"=" | *"= "* | *"=(none)"*)
        log "apt knows no rabbitmq-server or python3-pika candidate (run apt-get update)"
        exit 1 ;;
esac
if [ "$(cat "$cache/complete" 2>/dev/null)" = "$want" ]; then
    echo "$cache/root"
    exit 0
fi
# One unpacker at a time; a second waits and then finds it done.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [ "$(cat "$cache/complete" 2>/dev/null)" = "$want" ]; then
    echo "$cache/root"
    exit 0
fi
log "unpacking $want into $cache"
rm -rf "$cache"
mkdir -p "$cache/debs"
# shellcheck disable=SC2086 # a list of packages
(cd "$cache/debs" && apt-get download -q $want) >&2
for deb in "$cache"/debs/*.deb; do
    dpkg-deb -x "$deb" "$cache/root"
done
echo "$want" > "$cache/complete"
echo "$cache/root"
