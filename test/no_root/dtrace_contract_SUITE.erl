%%% OTP's dyntrace contract with no tracer attached: what every call
%%% returns, how arguments are routed, user tags, and a VM where the NIF
%%% cannot be loaded.
-module(dtrace_contract_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([available_on_linux/1,
         disabled_probes_return_false/1,
         disabled_probes_ignore_arguments/1,
         pn_label_checks_come_first/1,
         p_routing_clauses/1,
         user_trace_s1_disabled/1,
         tags_are_per_process/1,
         put_tag_converts_chardata/1,
         spread_and_restore_shapes/1,
         spans_disabled/1,
         nif_missing_module_still_loads/1,
         reloading_the_module_keeps_the_nif/1]).

all() ->
    [available_on_linux, disabled_probes_return_false,
     disabled_probes_ignore_arguments, pn_label_checks_come_first,
     p_routing_clauses, user_trace_s1_disabled, tags_are_per_process,
     put_tag_converts_chardata, spread_and_restore_shapes, spans_disabled,
     nif_missing_module_still_loads, reloading_the_module_keeps_the_nif].

init_per_suite(Config) ->
    {module, dtrace} = code:ensure_loaded(dtrace),
    Config.

end_per_suite(_Config) ->
    ok.

available_on_linux(_Config) ->
    Expected = element(2, os:type()) =:= linux,
    ?assertEqual(Expected, dtrace:available()).

%% Nobody traces this node, so every probe is disabled.
disabled_probes_return_false(_Config) ->
    Calls = [fun() -> dtrace:p() end,
             fun() -> dtrace:p(1) end,
             fun() -> dtrace:p("s") end,
             fun() -> dtrace:p(1, 2) end,
             fun() -> dtrace:p(1, "s") end,
             fun() -> dtrace:p(1, 2, 3) end,
             fun() -> dtrace:p(1, 2, 3, 4) end,
             fun() -> dtrace:p(1, 2, 3, 4, "a") end,
             fun() -> dtrace:p(1, 2, 3, 4, "a", "b") end,
             fun() -> dtrace:p(1, 2, 3, 4, "a", "b", "c") end,
             fun() -> dtrace:p(1, 2, 3, 4, "a", "b", "c", "d") end,
             fun() -> dtrace:pn(0) end,
             fun() -> dtrace:pn(950, 1) end,
             fun() -> dtrace:pn(7, 1, 2, 3, 4, "a", "b", "c", "d") end,
             fun() -> dtrace:user_trace_i4s4(undefined, 1, 2, 3, 4, "a", "b", "c", "d") end],
    [?assertEqual(false, F()) || F <- Calls].

%% The disabled check comes before any conversion: arguments that could
%% never be converted are not even looked at.
disabled_probes_ignore_arguments(_Config) ->
    Huge = lists:duplicate(100000, <<"0123456789">>),
    Deep = lists:foldl(fun(_, Acc) -> [Acc] end, [], lists:seq(1, 100000)),
    Bad = [self(), make_ref(), #{a => 1}, {x}, 1.5, fun() -> ok end, 1 bsl 200],
    ?assertEqual(false, dtrace:p(Huge, Deep)),
    ?assertEqual(false, dtrace:user_trace_s1(Huge)),
    [?assertEqual(false, dtrace:user_trace_i4s4(B, B, B, B, B, B, B, B, B)) || B <- Bad],
    [?assertEqual(false, dtrace:user_trace_s1(B)) || B <- Bad].

%% pn: a label that is not an integer in 0..1023 returns badarg, 951..1023
%% return error, whatever the probe's state (OTP's order).
pn_label_checks_come_first(_Config) ->
    [?assertEqual(badarg, dtrace:pn(L)) || L <- [-1, 1024, 1 bsl 70, foo, "1", 1.0]],
    [?assertEqual(error, dtrace:pn(L)) || L <- [951, 1000, 1023]],
    [?assertEqual(false, dtrace:pn(L)) || L <- [0, 1, 500, 950]],
    ?assertEqual(badarg, dtrace:pn(foo, 1, 2, 3, 4, "a", "b", "c", "d")),
    ?assertEqual(error, dtrace:pn(999, "x")).

%% Arities 1-4 end in a catch-all clause; from 5 on, integers must come
%% first, and anything else is a function_clause, as in OTP.
p_routing_clauses(_Config) ->
    ?assertEqual(false, dtrace:p("x", 1)),
    ?assertEqual(false, dtrace:p(a, b, c, d)),
    ?assertError(function_clause, dtrace:p("a", 1, 2, 3, 4)),
    ?assertError(function_clause, dtrace:p("a", "b", "c", "d", "e")),
    ?assertError(function_clause, dtrace:p(1, 2, 3, "a", 5, 6, 7, 8)),
    ?assertEqual(false, dtrace:p(1, 2, 3, 4, 5, 6, 7, 8)),
    ?assertError(function_clause, dtrace:pn(1, "a", 1, 2, 3, 4)),
    ?assertError(function_clause, dtrace:pn(1, 1, 2, 3, "a", 5, 6, 7, 8)).

user_trace_s1_disabled(_Config) ->
    ?assertEqual(false, dtrace:user_trace_s1("message")),
    ?assertEqual(false, dtrace:user_trace_s1(lists:duplicate(2000, $x))).

tags_are_per_process(_Config) ->
    Self = self(),
    ?assertEqual(undefined, dtrace:get_tag()),
    ?assertEqual(undefined, dtrace:put_tag(<<"a">>)),
    ?assertEqual(<<"a">>, dtrace:put_tag("b")),
    ?assertEqual(<<"b">>, dtrace:get_tag()),
    ?assertEqual(<<"b">>, dtrace:get_tag_data()),
    spawn_link(fun() -> Self ! {child, dtrace:get_tag(), dtrace:get_tag_data()} end),
    receive {child, T, TD} -> ?assertEqual({undefined, undefined}, {T, TD}) end,
    ?assertEqual(<<"b">>, dtrace:put_tag(undefined)),
    ?assertEqual(undefined, dtrace:get_tag()).

%% put_tag converts chardata with unicode:characters_to_binary/1.
put_tag_converts_chardata(_Config) ->
    dtrace:put_tag([<<"ab">>, $c, "d", [1046]]),
    ?assertEqual(<<"abcd", 1046/utf8>>, dtrace:get_tag()),
    ?assertError(badarg, dtrace:put_tag(self())),
    ?assertError(badarg, dtrace:put_tag([16#110000])),
    ?assertEqual(<<"abcd", 1046/utf8>>, dtrace:get_tag()),
    dtrace:put_tag(undefined).

spread_and_restore_shapes(_Config) ->
    dtrace:put_tag(<<"t">>),
    ?assertEqual({0, <<"t">>}, dtrace:spread_tag(true)),
    ?assertEqual({1, <<"t">>}, dtrace:spread_tag(false)),
    State = dtrace:spread_tag(true),
    ?assertEqual({0, <<"t">>}, State),
    dtrace:put_tag(undefined),
    ?assertEqual({1, []}, dtrace:spread_tag(false)),
    ?assertEqual(true, dtrace:restore_tag(State)),
    ?assertEqual(<<"t">>, dtrace:get_tag()),
    ?assertEqual(true, dtrace:restore_tag(true)),
    [?assertError(badarg, dtrace:spread_tag(B)) || B <- [1, undefined, "true"]],
    [?assertError(badarg, dtrace:restore_tag(B)) || B <- [false, {-1, []}, {0, foo}, {a, []}, {0, [], x}]],
    %% A state restored in another process.
    Self = self(),
    spawn_link(fun() -> Self ! {restored, dtrace:restore_tag(State), dtrace:get_tag()} end),
    receive {restored, R, T} -> ?assertEqual({true, <<"t">>}, {R, T}) end,
    dtrace:put_tag(undefined).

%% A copy of the application without its NIF: the module loads, logs a
%% warning, and every probe returns false, as OTP's dyntrace does on a VM
%% built without dynamic trace.
nif_missing_module_still_loads(Config) ->
    Root = filename:join(?config(priv_dir, Config), "no_nif"),
    Ebin = filename:join([Root, "dtrace", "ebin"]),
    ok = filelib:ensure_dir(filename:join(Ebin, "x")),
    %% The application's modules, without its priv/ (no library to load).
    Beams = filelib:wildcard(filename:join(filename:dirname(code:which(dtrace)), "*.beam")),
    [{ok, _} = file:copy(B, filename:join(Ebin, filename:basename(B))) || B <- Beams],
    {ok, Peer, _} = peer:start_link(#{connection => standard_io, args => ["-pa", Ebin]}),
    try
        ?assertEqual({module, dtrace}, peer:call(Peer, code, ensure_loaded, [dtrace])),
        ?assertEqual(filename:join(Ebin, "dtrace.beam"), peer:call(Peer, code, which, [dtrace])),
        Results = [peer:call(Peer, dtrace, F, A)
                   || {F, A} <- [{available, []}, {p, []}, {p, [1, 2, "x"]},
                                 {pn, [5, 1]}, {user_trace_s1, ["x"]},
                                 {user_trace_i4s4, [a, 1, 2, 3, 4, a, b, c, d]}]],
        ?assertEqual([false, false, false, false, false, false], Results),
        ?assertEqual([], peer:call(Peer, dtrace, span, [kind, fun erlang:nodes/0])),
        ?assertEqual(#{sdt => false, lttng => {false, <<"NIF not loaded">>}, dof => {false, <<"NIF not loaded">>}},
                     peer:call(Peer, dtrace, sinks, [])),
        ?assertEqual(undefined, peer:call(Peer, dtrace, put_tag, ["x"]))
    after
        peer:stop(Peer)
    end.

%% A new version of a module with NIFs (l(dtrace_nif), l(dtrace_tracer), a relup)
%% binds to the library the old version holds: the libraries' upgrade
%% callbacks accept it. Then purging the old version, and deleting and
%% loading again, keep the NIFs too; the tracer module's still feed the VM
%% probes (a trace with {tracer, dtrace_tracer, []} is accepted).
reloading_the_module_keeps_the_nif(_Config) ->
    Peer = dtrace_test_peer:start_peer(),
    try
        Call = fun(M, F, A) -> peer:call(Peer, M, F, A) end,
        %% As the application does: the VM takes a loaded tracer module only.
        {module, dtrace_tracer} = Call(code, ensure_loaded, [dtrace_tracer]),
        [begin
             ?assertEqual({module, M}, Call(code, load_file, [M])),
             ?assertEqual(true, Call(erlang, check_old_code, [M])),
             ?assertEqual(true, Call(dtrace, available, [])),
             ?assertEqual(false, Call(dtrace, p, [1])),
             ?assertEqual(true, Call(code, soft_purge, [M])),
             ?assertEqual({module, M}, Call(code, load_file, [M])),
             ?assertEqual(true, Call(dtrace, available, [])),
             ?assertEqual(true, Call(code, soft_purge, [M])),
             ?assertEqual(true, Call(code, delete, [M])),
             ?assertEqual(true, Call(code, soft_purge, [M])),
             ?assertEqual({module, M}, Call(code, load_file, [M])),
             ?assertEqual(true, Call(dtrace, available, [])),
             ?assertEqual(1, Call(erlang, trace, [Call(erlang, whereis, [init]), true,
                                                  [procs, {tracer, dtrace_tracer, []}]])),
             ?assertEqual(1, Call(erlang, trace, [Call(erlang, whereis, [init]), false, [procs]]))
         end || M <- [dtrace_nif, dtrace_tracer]]
    after
        dtrace_test_peer:stop_peer(Peer)
    end.

%% Spans with no tracer: span/2 returns what the work returns and raises
%% what it raises, touching nothing (no span id left in the process);
%% span_begin/1 returns a span that span_end/1 ignores (false); span_end/1
%% raises badarg for anything else.
spans_disabled(_Config) ->
    ?assertEqual(42, dtrace:span(work, fun() -> 42 end)),
    ?assertEqual({ok, x}, dtrace:span(<<"bin kind">>, fun() -> {ok, x} end)),
    ?assertError(boom, dtrace:span(failing, fun() -> error(boom) end)),
    ?assertThrow(t, dtrace:span(["io", $l], fun() -> throw(t) end)),
    ?assertEqual(undefined, get('$dtrace_span')),
    Span = dtrace:span_begin(cross),
    ?assertEqual(false, dtrace:span_end(Span)),
    ?assertError(badarg, dtrace:span_end(not_a_span)),
    ?assertError(function_clause, dtrace:span(kind, not_a_fun)).
