#!/bin/sh
# Profiles the hot path of a VM probe: a ping-pong (bench/dtrace_bench_vm.erl's
# shape) in a node running the dtrace application, with a tracer on the
# message probe, under `perf record -g` for 4 s; prints ns per message and
# the 25 costliest symbols. For bench/profile.md (written by hand from its
# output).
#   sh bench/profile.sh bpftrace    # bpftrace counting erlang:message__send
#   sh bench/profile.sh lttng       # an LTTng session on org_erlang_dyntrace:message_send
#   sh bench/profile.sh none        # no tracer (the ping-pong alone)
#   sh bench/profile.sh no-trap     # message__send's semaphore raised by hand:
#                                   # the library's work, no uprobe
# MESSAGE=list100 (a name of dtrace_floors:messages/0: ping, gen_call,
# bin1k, list100, map10) sends that message both ways instead of the
# {Pid, ping} / ping of make bench's ping-pong.
# Root, after `make` (it uses _build/default/lib/dtrace).
set -eu
cd "$(dirname "$0")/.."
mode=${1:-bpftrace}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$work/perf.data" "$KEEP"; rm -rf "$work"; lttng destroy dtrace_profile >/dev/null 2>&1 || true' EXIT
nif=$(pwd)/_build/default/lib/dtrace/priv/dtrace_nif.so
case "$mode" in
    lttng)
        lttng destroy dtrace_profile >/dev/null 2>&1 || true
        lttng create dtrace_profile --output="$work/trace" >/dev/null
        lttng enable-channel -u -s dtrace_profile --subbuf-size=8M --num-subbuf=8 ch >/dev/null
        lttng enable-event -u -s dtrace_profile -c ch org_erlang_dyntrace:message_send >/dev/null
        lttng start dtrace_profile >/dev/null ;;
esac
# The node's code, compiled (an -eval fun would be interpreted).
cat > "$work/dtrace_profile.erl" <<'ERL'
-module(dtrace_profile).
-export([main/0]).
main() ->
    {ok, _} = application:ensure_all_started(dtrace),
    ok = file:write_file(os:getenv("PIDFILE"), os:getpid()),
    Want = os:getenv("MODE") =/= "none",
    _ = case os:getenv("MODE") of
            "no-trap" -> dtrace_bench:raise_semaphore(code:priv_dir(dtrace) ++ "/dtrace_nif.so", "message__send");
            _ -> ok
        end,
    ok = ready(Want, 3000),
    %% The tracer (if any) listens: perf starts now, for 4 s.
    ok = file:write_file(os:getenv("READYFILE"), <<"ready">>),
    %% On scheduler 1, both processes, as make bench's ping-pong.
    Self = self(),
    Runs = case os:getenv("MESSAGE") of
               M when M =:= false; M =:= "" ->
                   [begin
                        {P, R} = spawn_opt(fun() -> Self ! {t, self(), pingpong(500000)} end,
                                           [monitor, {scheduler, 1}]),
                        receive {t, P, T} -> receive {'DOWN', R, _, _, _} -> T end end
                    end || _ <- lists:seq(1, 12)];
               M ->
                   [dtrace_floors:message_pingpong(false, 200000, list_to_atom(M), pinned)
                    || _ <- lists:seq(1, 12)]
           end,
    io:format("ns per message (median of 12 runs of ~s messages): ~.1f~n",
              [case os:getenv("MESSAGE") of M1 when M1 =:= false; M1 =:= "" -> "1M"; _ -> "400k" end,
               lists:nth(6, lists:sort(Runs))]),
    halt().
ready(_Want, 0) -> error(no_flags);
ready(Want, N) ->
    ok = dtrace_vm:sync(),
    #{flags := #{processes := P}} = dtrace:vm_probes(),
    case lists:member(send, P) =:= Want of
        true -> ok;
        false -> timer:sleep(10), ready(Want, N - 1)
    end.
pingpong(N) ->
    Me = self(),
    E = spawn_opt(fun Loop() -> receive {F, M} -> F ! M, Loop() end end, [link, {scheduler, 1}]),
    T0 = erlang:monotonic_time(nanosecond),
    loop(E, Me, N),
    T = erlang:monotonic_time(nanosecond) - T0,
    unlink(E),
    exit(E, kill),
    T / (2 * N).
loop(_E, _Me, 0) -> ok;
loop(E, Me, N) -> E ! {Me, ping}, receive ping -> loop(E, Me, N - 1) end.
ERL
erlc -o "$work" "$work/dtrace_profile.erl" bench/dtrace_floors.erl bench/dtrace_floors_build.erl \
    bench/dtrace_floors_programs.erl bench/dtrace_bench.erl bench/dtrace_bench_vm.erl bench/dtrace_bench_report.erl
PIDFILE="$work/pid" READYFILE="$work/ready" MODE="$mode" \
    erl -noshell +S 2:2 -pa _build/default/lib/dtrace/ebin -pa "$work" -s dtrace_profile main &
node=$!
while [ ! -s "$work/pid" ]; do sleep 0.1; done
pid=$(cat "$work/pid")
if [ "$mode" = bpftrace ]; then
    bpftrace -p "$pid" -e "usdt:$nif:erlang:message__send { @n = count(); }" >"$work/bpftrace.out" 2>&1 &
    tracer=$!
fi
while [ ! -s "$work/ready" ]; do sleep 0.1; done
sleep 1
perf record ${PERF_OPTS:--g} -o "$work/perf.data" -p "$pid" -- sleep ${PERF_SECS:-4} >/dev/null 2>&1
wait "$node"
[ -n "${tracer:-}" ] && kill -INT "$tracer" && wait "$tracer" || true
perf report -i "$work/perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null |
    grep -E "^ +[0-9.]+%" | head -${TOP:-25}
