#!/bin/sh
# Records test/python/fixtures/slow-spans.txt, what the unit tests replay:
# priv/bpftrace/slow-spans.bt's own output (through priv/bin/dtrace-bpftrace,
# as dtrace-slow-spans runs it) on a node running dtrace_test_service's
# planted slow requests (tags "req-2" sleep and throw, "req-4" GC, "req-6"
# a gen_server call, "req-8" file I/O) and a span with a slow span nested
# in it ("nested"). Spans tagged "ready" come first: the node runs them
# until the script sees every kind of event, i.e. every probe attached.
# Root and bpftrace, after rebar3 compile: sh test/python/record-slow-spans.sh
set -eu
cd "$(dirname "$0")/../.."
out=test/python/fixtures/slow-spans.txt
work=$(mktemp -d /var/tmp/slow-spans-fixture-XXXXXX)
node= tracer=
trap 'kill $tracer $node 2>/dev/null || true; rm -rf "$work"' EXIT

# Waits until the shell condition $1 holds, at most $2 seconds.
wait_for() {
    deadline=$(($(date +%s) + $2))
    until eval "$1"; do
        [ "$(date +%s)" -lt "$deadline" ] || { echo "timed out waiting for: $1" >&2; exit 1; }
        sleep 0.1
    done
}

erlc -o "$work" test/support/dtrace_test_service.erl
erl -noshell -sname "dtrace_fixture_$$" -pa _build/default/lib/dtrace/ebin -pa "$work" -eval "
    {ok, _} = application:ensure_all_started(dtrace),
    Work = \"$work\",
    Ready = fun Loop() ->
                case filelib:is_file(Work ++ \"/go\") of
                    true -> ok;
                    false ->
                        dtrace:span(ready, fun() -> {ok, _} = dtrace_file:read_file_info(Work),
                                                    true = erlang:garbage_collect(),
                                                    timer:sleep(7) end),
                        Loop()
                end
            end,
    ok = file:write_file(Work ++ \"/pid\", os:getpid()),
    dtrace:put_tag(\"ready\"),
    Ready(),
    _ = dtrace_test_service:run(#{requests => 8, every => 2}, Work),
    dtrace:put_tag(\"nested\"),
    dtrace:span(request, fun() -> dtrace:span(db_query, fun() -> timer:sleep(20) end), timer:sleep(15) end),
    ok = file:write_file(Work ++ \"/done\", <<>>),
    timer:sleep(infinity)." &
node=$!
wait_for '[ -s "$work/pid" ]' 30
BPFTRACE_PERF_RB_PAGES=1024 priv/bin/dtrace-bpftrace -p "$(cat "$work/pid")" priv/bpftrace/slow-spans.bt \
    "$(cat "$work/pid")" > "$work/raw" &
tracer=$!
for kind in S G F f E N; do
    wait_for "grep -q '^$kind	' '$work/raw'" 60
done
touch "$work/go"
wait_for '[ -f "$work/done" ]' 120
# The last events drained: the nested span's end is printed.
wait_for "grep -q '^E	.*	request	nested\$' '$work/raw'" 10
kill -INT "$tracer"
wait "$tracer" || true
tracer=
cp "$work/raw" "$out"
echo "$out: $(wc -l < "$out") lines"
