%%% `make soak`: the any-term property for 10 million calls with the probes
%%% disabled, then 10 million with a tracer attached (when one can attach:
%%% root and bpftrace), in this node. Prints what it did; exits non-zero on a
%%% counterexample. The crash it looks for would end this VM.
-module(dtrace_soak).

-export([main/1]).

main([CallsArg]) ->
    Calls = list_to_integer(CallsArg),
    true = dtrace:available(),
    Mem0 = erlang:memory(total),
    T0 = erlang:monotonic_time(second),
    Disabled = dtrace_props:run(Calls),
    io:format("soak: ~b calls with arbitrary terms, probes disabled: all documented (~b s)~n",
              [Disabled, erlang:monotonic_time(second) - T0]),
    case {os:find_executable("bpftrace"), string:trim(os:cmd("id -u"))} of
        {false, _} -> io:format("soak: enabled half skipped: bpftrace is not installed~n");
        {_, "0"} -> enabled(Calls);
        _ -> io:format("soak: enabled half skipped: attaching bpftrace needs root~n")
    end,
    [erlang:garbage_collect(P) || P <- processes()],
    io:format("soak: erlang:memory(total) ~.1f -> ~.1f MB~n",
              [Mem0 / 1048576, erlang:memory(total) / 1048576]),
    halt(0).

enabled(Calls) ->
    Probes = ["user_trace__s1", "user_trace__i4s4"]
        ++ ["user_trace__n" ++ integer_to_list(L) || L <- lists:seq(0, 31)],
    %% No library path: probes are found through this process's own
    %% mappings, even if the file on disk was replaced since it was loaded.
    Program = lists:flatten([["usdt::erlang:", P, " { @events = count(); }\n"] || P <- Probes]),
    Tracer = dtrace_test_tracer:bpftrace_start(os:getpid(), Program),
    dtrace_test_workload:fire_until_true(fun dtrace:p/0),
    T0 = erlang:monotonic_time(second),
    Enabled = dtrace_props:run(Calls),
    Lines = dtrace_test_tracer:bpftrace_stop(Tracer),
    Events = [L || <<"@events: ", _/binary>> = L <- Lines],
    io:format("soak: ~b calls with arbitrary terms, tracer attached: all documented, ~s (~b s)~n",
              [Enabled, Events, erlang:monotonic_time(second) - T0]).
