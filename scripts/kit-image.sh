#!/bin/sh
# The steps of kit/Dockerfile, the kit's container recipe, for a Debian
# root made and used as the image would be (dtrace_kit_SUITE; no container
# engine here), so that the recipe and its test cannot drift:
#   scripts/kit-image.sh base SUITE  the RUN steps before its COPY, one a line,
#                                    for a minbase root of SUITE (scripts/guest.sh
#                                    runs them in its root kit-SUITE), which
#                                    must be the FROM line's (debian:SUITE-slim)
#   scripts/kit-image.sh kit         the RUN steps after the COPY, one a line
#                                    (run with the ARGs in the environment)
#   scripts/kit-image.sh copy        the COPY's destination directory
#   scripts/kit-image.sh path        what ENV PATH puts before $PATH
set -eu
file=$(dirname "$0")/../kit/Dockerfile
# The instructions, one a line: comments dropped, continuations joined.
instructions() {
    sed '/^[[:space:]]*#/d' "$file" | awk '{ if (sub(/\\$/, "")) { line = line $0; next } print line $0; line = "" }'
}
case ${1:-} in
    base)
        [ $# -eq 2 ] || { echo "usage: scripts/kit-image.sh base SUITE" >&2; exit 2; }
        from=$(instructions | sed -n 's/^FROM debian:\([a-z]*\)-slim$/\1/p')
        [ "$from" = "$2" ] || { echo "kit-image: kit/Dockerfile is FROM debian:$from-slim, not $2" >&2; exit 1; }
        instructions | awk '$1 == "COPY" { exit } $1 == "RUN" { sub(/^RUN[[:space:]]+/, ""); print }' ;;
    kit) instructions | awk '$1 == "COPY" { on = 1 } on && $1 == "RUN" { sub(/^RUN[[:space:]]+/, ""); print }' ;;
    copy) instructions | awk '$1 == "COPY" { print $NF; exit }' ;;
    path) instructions | sed -n 's/^ENV PATH=\(.*\):\$PATH$/\1/p' ;;
    *) sed -n '5,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
