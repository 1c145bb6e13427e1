%%% @doc Process names for tracers: while a tracer listens to
%%% `dtrace_process__name(p, name)' (not OTP's), this process, started by
%%% the `dtrace' application, fires it for every live process when a tracer
%%% starts listening (within 100 ms), and for each new or renamed process
%%% after, checked every 100 ms on a node of up to 10,000 processes, and
%%% less often on larger ones (10 us per process apart: about 0.5% of a
%%% scheduler), at most `process_names_ms' milliseconds apart
%%% (application environment, default 1000). The shipped scripts keep the names and print them
%%% beside the pids, so `<0.1091.0>' reads as the consumer's
%%% `rabbit_channel'; the pid stays in their output, to match what
%%% `observer', `recon' and `rabbitmqctl' print.
%%%
%%% A process's name is the first of ({@link name/1}):
%%% <ol>
%%% <li>its registered name (`rabbit_event');</li>
%%% <li>its `proc_lib' label (`proc_lib:set_label/1', OTP 27);</li>
%%% <li>a `process_name' in its dictionary, as RabbitMQ keeps one
%%%   (`{rabbit_channel,{<<"127.0.0.1:46018 -> 127.0.0.1:5672">>,1}}');</li>
%%% <li>its `proc_lib' initial call (`$initial_call', `rabbit_channel:init/1');</li>
%%% <li>its initial call (`erpc:execute_call/4', `timer:sleep/1': what a
%%%   spawn, or a `spawn_request' over distribution, named), unless that
%%%   says only that it was started with a fun (`erlang:apply/2':
%%%   `spawn/1', `spawn(Node, Fun)'); then the function at the bottom of
%%%   its stack, the fun's own code while it runs it
%%%   (`mymod:'-handle/2-fun-0-'/0'), else `erlang:apply/2'.</li>
%%% </ol>
%%% Terms are written as `~0tp' writes them, cut at 255 bytes.
%%%
%%% When: all processes when the probe's listener count rises (an SDT
%%% semaphore: each tracer raises it; a tracer attaches its probes one by
%%% one, so a second later they are all named again); after that, a process
%%% not seen before is named at the next check, a process is checked
%%% again at each of its first 10 checks (a label set after it started)
%%% and every process at every 30th (a later registration or label).
%%%
%%% Cost, only while a tracer listens: each check lists the processes
%%% (`erlang:processes/0') and looks each one up in a map (about 5 ms per
%%% 100,000 processes, measured on OTP 25); naming a process reads its registered name,
%%% initial call and three dictionary keys (on OTP 25 and 26.0/26.1, which
%%% cannot read one key, its whole dictionary: about 5 us a process), and
%%% for a fun its stack, for the new, the young and, every 30th check, all. Nothing while no
%%% tracer listens but one NIF call per check.
%%% @end
-module(dtrace_names).
-behaviour(gen_server).

-export([start_link/0, name/1, live/1, sync/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

%% OTP 25's spec of erlang:process_info/2 lacks {dictionary, Key} (OTP
%% 26.2 and later take it: by_key/0 asks the node once).
-dialyzer({nowarn_function, [dictionary_name/1, by_key/0]}).

%% How often the listeners are read (ms).
-define(TICK, 100).
%% After a rise, every process is named again this much later (ms).
-define(REFIRE_MS, 1000).
%% A process's name is checked again at each of its first YOUNG checks.
-define(YOUNG, 10).
%% Every process's name is checked again every EVERY checks.
-define(EVERY, 30).
%% Below this many processes named, dead ones are not looked for.
-define(MIN_DEAD_CHECK, 1000).
-define(MAX_BYTES, 255).

-record(s, {interval :: pos_integer(),
            %% When the last check ran (monotonic ms).
            last = 0 :: integer(),
            listeners = false :: false | pos_integer(),
            %% Checks left that name every process (after a rise).
            full = 0 :: non_neg_integer(),
            %% When every process is named again after a rise (monotonic ms).
            refire_at :: integer() | undefined,
            checks = 0 :: non_neg_integer(),
            %% Pid => Name, of every process named.
            known = #{} :: #{pid() => binary()},
            %% Pid => checks seen, of those checked again at each check.
            young = #{} :: #{pid() => non_neg_integer()}}).

%% @private
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @private Checks now, while a tracer listens (the names of the processes
%% alive now fired, where new): for tests.
-spec sync() -> ok.
sync() ->
    gen_server:call(?MODULE, sync).

%% @doc The names of the live local processes, at most `Max' of them
%% (the first `Max' that `erlang:processes/0' lists), as
%% `#{<<"<0.90.0>">> => <<"my_server">>}': pids written as
%% `pid_to_list/1' writes them, names as {@link name/1} gives them. For
%% the flight recorder's snapshots (their sidecar), whose report names
%% processes from it. Costs what {@link name/1} costs per process (up to
%% about 5 us on OTP 25).
-spec live(Max :: non_neg_integer()) -> #{binary() => binary()}.
live(Max) ->
    maps:from_list([{list_to_binary(pid_to_list(P)), N}
                    || P <- lists:sublist(erlang:processes(), Max), N <- [name(P)], is_binary(N)]).

%% @doc The name `dtrace_process__name' gives `Pid' (a local process),
%% as a binary (see the module doc for which name), or `undefined' when
%% the process is not alive.
-spec name(Pid :: pid()) -> binary() | undefined.
name(Pid) ->
    case erlang:process_info(Pid, [registered_name, initial_call]) of
        undefined -> undefined;
        [{registered_name, R}, _] when is_atom(R) -> atom_to_binary(R, utf8);
        [_, {initial_call, Initial}] ->
            case dictionary_name(Pid) of
                {label, L} -> text(L);
                {process_name, N} -> text(N);
                {initial_call, MFA} -> mfa(MFA);
                none -> spawned(Pid, Initial)
            end
    end.

%% The initial call, or for a fun's process the function at the bottom of
%% its stack.
spawned(Pid, {erlang, apply, 2} = Initial) ->
    case erlang:process_info(Pid, current_stacktrace) of
        {current_stacktrace, [_ | _] = Stack} ->
            case [{M, F, A} || {M, F, A, _} <- Stack, {M, F, length_or(A)} =/= Initial] of
                [] -> mfa(Initial);
                Own -> mfa(lists:last(Own))
            end;
        _ -> mfa(Initial)
    end;
spawned(_Pid, Initial) ->
    mfa(Initial).

length_or(Args) when is_list(Args) -> length(Args);
length_or(Arity) -> Arity.

%% The first of the dictionary's keys that names a process.
dictionary_name(Pid) ->
    Keys = ['$process_label', process_name, '$initial_call'],
    Values = case by_key() of
                 true ->
                     [{K, V} || K <- Keys, {{dictionary, _}, V} <- [erlang:process_info(Pid, {dictionary, K})],
                                V =/= undefined];
                 false ->
                     %% OTP before 26.2: the whole dictionary.
                     case erlang:process_info(Pid, dictionary) of
                         {dictionary, D} -> [{K, V} || K <- Keys, {_, V} <- [lists:keyfind(K, 1, D)]];
                         undefined -> []
                     end
             end,
    case [{Tag, V} || {K, Tag} <- [{'$process_label', label}, {process_name, process_name},
                                   {'$initial_call', initial_call}],
                      {_, V} <- [lists:keyfind(K, 1, Values)]] of
        [{initial_call, {_, _, _}} = First | _] -> First;
        [{initial_call, _} | _] -> none;
        [First | _] -> First;
        [] -> none
    end.

%% Can process_info/2 read one dictionary key (OTP 26.2 and later)? Asked
%% once per node.
by_key() ->
    case persistent_term:get({?MODULE, by_key}, unknown) of
        unknown ->
            ByKey = try erlang:process_info(self(), {dictionary, '$dtrace_names'}) of
                        _ -> true
                    catch
                        error:badarg -> false
                    end,
            persistent_term:put({?MODULE, by_key}, ByKey),
            ByKey;
        ByKey ->
            ByKey
    end.

mfa({M, F, A}) when is_atom(M), is_atom(F), is_integer(A) ->
    iolist_to_binary(io_lib:format("~tw:~tw/~b", [M, F, A]));
mfa({M, F, Args}) when is_atom(M), is_atom(F), is_list(Args) ->
    mfa({M, F, length(Args)});
mfa(Other) ->
    text(Other).

text(Term) ->
    cut(unicode:characters_to_binary(io_lib:format("~0tp", [Term], [{chars_limit, ?MAX_BYTES}]))).

cut(<<B:?MAX_BYTES/binary, _/binary>>) -> B;
cut(B) when is_binary(B) -> B;
cut(_) -> <<"?">>.

%%%===================================================================

%% @private
init([]) ->
    Interval = case application:get_env(dtrace, process_names_ms, 1000) of
                   I when is_integer(I), I >= 1 -> I;
                   _ -> 1000
               end,
    self() ! check,
    {ok, #s{interval = Interval}}.

%% @private
handle_call(sync, _From, S) ->
    S1 = case dtrace_nif:process_names() of
             false -> S;
             N -> check_all(S#s{listeners = N, last = erlang:monotonic_time(millisecond)})
         end,
    {reply, ok, S1};
handle_call(_Msg, _From, S) ->
    {reply, {error, badarg}, S}.

%% @private
handle_cast(_Msg, S) ->
    {noreply, S}.

%% @private
handle_info(check, S) ->
    erlang:send_after(?TICK, self(), check),
    {noreply, tick(dtrace_nif:process_names(), erlang:monotonic_time(millisecond), S)};
handle_info(_Msg, S) ->
    {noreply, S}.

%% Every TICK: the listeners; a check when they rose, or when the last
%% check is older than the interval for this many processes.
tick(false, _Now, S) ->
    S#s{listeners = false, full = 0, refire_at = undefined, known = #{}, young = #{}};
tick(N, Now, #s{listeners = Was} = S) when Was =:= false; N > Was ->
    %% A tracer came: every process now, and a second later again (a
    %% tracer raises the semaphore ms before its probe is live).
    check_all(S#s{listeners = N, full = 1, last = Now, refire_at = Now + ?REFIRE_MS});
tick(N, Now, #s{refire_at = At} = S) when is_integer(At), Now >= At ->
    check_all(S#s{listeners = N, full = 1, last = Now, refire_at = undefined});
tick(N, Now, #s{last = Last, interval = Max} = S) ->
    %% About 10 us per process between checks (a check looks each one up:
    %% about 50 ns), at least TICK and at most process_names_ms apart.
    Interval = min(Max, max(?TICK, erlang:system_info(process_count) div 100)),
    case Now - Last >= Interval of
        true -> check_all(S#s{listeners = N, last = Now});
        false -> S#s{listeners = N}
    end.

%% Every process named (fired for each when Full, else for those whose
%% name changed) at a full check, every EVERY checks, or when the dead
%% outnumber the living; else only the new ones and the young.
check_all(#s{full = Full, checks = Checks, known = Known} = S)
  when Full > 0; Checks rem ?EVERY =:= 0 ->
    Fire = Full > 0,
    Known1 = lists:foldl(fun(Pid, Acc) ->
                                 Old = maps:get(Pid, Known, undefined),
                                 case name(Pid) of
                                     undefined -> Acc;
                                     Old when not Fire -> Acc#{Pid => Old};
                                     New -> named(Pid, New), Acc#{Pid => New}
                                 end
                         end, #{}, erlang:processes()),
    S#s{full = max(0, Full - 1), checks = Checks + 1, known = Known1, young = #{}};
check_all(#s{known = Known} = S)
  when map_size(Known) > 2 * ?MIN_DEAD_CHECK ->
    case map_size(Known) > 2 * erlang:system_info(process_count) of
        true -> check_all(S#s{checks = 0});
        false -> check_new(S)
    end;
check_all(S) ->
    check_new(S).

check_new(#s{checks = Checks, known = Known, young = Young} = S) ->
    %% The young: checked again (a label or name set after they started).
    {Known1, Young1} =
        maps:fold(fun(Pid, Seen, {K, Y}) ->
                          case name(Pid) of
                              undefined -> {maps:remove(Pid, K), Y};
                              Name ->
                                  _ = maps:get(Pid, K, undefined) =:= Name orelse named(Pid, Name),
                                  Y1 = case Seen + 1 < ?YOUNG of
                                           true -> Y#{Pid => Seen + 1};
                                           false -> Y
                                       end,
                                  {K#{Pid => Name}, Y1}
                          end
                  end, {Known, #{}}, Young),
    {Known2, Young2} =
        lists:foldl(fun(Pid, {K, Y} = Acc) ->
                            case is_map_key(Pid, K) of
                                true -> Acc;
                                false ->
                                    case name(Pid) of
                                        undefined -> Acc;
                                        Name -> named(Pid, Name), {K#{Pid => Name}, Y#{Pid => 0}}
                                    end
                            end
                    end, {Known1, Young1}, erlang:processes()),
    S#s{checks = Checks + 1, known = Known2, young = Young2}.

named(Pid, Name) ->
    _ = dtrace_nif:process_name(Pid, Name),
    ok.
