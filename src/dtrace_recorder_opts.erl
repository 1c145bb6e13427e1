%%% @doc The flight recorder's options ({@link dtrace_recorder:start/1}):
%%% checked, completed with their defaults, and the names the recorder
%%% gives its LTTng session, triggers and directory.
%%%
%%% Names. A recorder's session is `dtrace-rec-NODE-RECORDER-OSPID', where
%%% NODE is the node name (characters other than letters, digits and `_'
%%% turned into `_', at most 40 of them) followed by `_' and 8 hex digits of
%%% a hash of the full name, or `nonode' on a node without distribution;
%%% RECORDER is the recorder's registered name, likewise cleaned; OSPID the
%%% node's OS process id. Its triggers are `SESSION-tIgG' (trigger I of the
%%% options, generation G). `-' separates the parts and appears in no part,
%%% so a name says whose it is, and a recorder that starts removes by name:
%%% <ul>
%%% <li>what an earlier incarnation of itself left (same node name and
%%%   recorder name, any OS pid: a node name is unique on a host while the
%%%   node runs; for `nonode', the same OS pid);</li>
%%% <li>what a recorder of a node of this host (its name ends with this
%%%   host's name) or without distribution left when its OS process died
%%%   (no `/proc/OSPID'): a node killed before it could stop its
%%%   recorder.</li>
%%% </ul>
%%% Nothing else matches: not another tool's sessions, not a live node's,
%%% not those of a node of another host (a container) sharing the session
%%% daemon.
%%% @end
-module(dtrace_recorder_opts).

-export([validate/1, defaults/0, event_set/1, session_name/1, dir_name/1, node_part/0, trigger_name/3,
         parse_session_name/1, leftover/2, mark_label/0]).

-export_type([conf/0, trigger_spec/0]).

-type trigger_spec() :: {pn, 0..950, binary()} | {event, binary(), binary()}.
-type conf() :: #{name := atom(),
                  events := [binary()],
                  buffer := {pos_integer(), pos_integer()},
                  triggers := [trigger_spec()],
                  max_snapshots := pos_integer(),
                  min_interval_ms := non_neg_integer(),
                  dir := string(),
                  timeout_ms := pos_integer(),
                  check_ms := pos_integer(),
                  lttng := string()}.

%% The pn label of the recorder's own marker events (trigger reasons).
-define(MARK_LABEL, 949).
-define(MAX_TRIGGERS, 16).

%% @doc The options' defaults. `dir' defaults to the user cache directory
%% (`filename:basedir(user_cache, "dtrace_recorder")', i.e.
%% `$XDG_CACHE_HOME/dtrace_recorder' or `~/.cache/dtrace_recorder').
-spec defaults() -> conf().
defaults() ->
    #{name => dtrace_recorder,
      events => event_set(default),
      buffer => {4, 256 * 1024},
      triggers => [],
      max_snapshots => 10,
      min_interval_ms => 60000,
      dir => filename:basedir(user_cache, "dtrace_recorder"),
      timeout_ms => 15000,
      check_ms => 10000,
      lttng => "lttng"}.

%% @doc The event patterns of the recorder's two event sets (its `events'
%% option as an atom). `default', what an always-on recorder can afford
%% (JFR's default settings, which drop duration events below a
%% threshold): the user probes (`p/N', `pn/N', which the application fires
%% where it chose to) and `span_slow', the spans at least the node's
%% slow-span threshold long (1 ms by default, dtrace:slow_span_threshold/1);
%% a span below it costs two clock reads and writes nothing.
%% `detail', for a recorder started while an incident is on: every event of
%% `org_erlang_dtrace', so every span's begin and end, the file probes of
%% `dtrace_file', and the span_vm_* events (each span's process traced for
%% scheduling, GC and messages) that let the report say why a request was
%% slow. The costs of both are in BENCHMARKS.md ("The flight recorder always
%% on").
-dialyzer({no_underspecs, [event_set/1]}).
-spec event_set(default | detail) -> [binary(), ...].
event_set(default) ->
    [<<"org_erlang_dtrace:user_trace_*">>, <<"org_erlang_dtrace:span_slow">>];
event_set(detail) ->
    [<<"org_erlang_dtrace:*">>].

%% @doc The label of `dtrace:pn/N' the recorder fires its marker events
%% with (the reason of a snapshot): 949. Triggers on it are refused.
-spec mark_label() -> 949.
mark_label() ->
    ?MARK_LABEL.

%% @doc Checks the options map `Opts' of {@link dtrace_recorder:start/1}
%% and completes it with the defaults. Returns `{error, {badopt, Key,
%% Value}}' for an unknown key or a bad value, where `Value' is the
%% offending element for list options (one event pattern, one trigger).
-spec validate(Opts :: map()) -> {ok, conf()} | {error, {badopt, term(), term()}}.
validate(Opts) when is_map(Opts) ->
    Defaults = defaults(),
    try
        maps:fold(fun(K, V, Acc) ->
                          case maps:is_key(K, Defaults) of
                              true -> Acc#{K => check(K, V)};
                              false -> throw({badopt, K, V})
                          end
                  end, Defaults, Opts)
    of
        Conf -> {ok, Conf}
    catch
        throw:{badopt, _, _} = Bad -> {error, Bad}
    end;
validate(Opts) ->
    {error, {badopt, options, Opts}}.

check(name, V) when is_atom(V), V =/= undefined ->
    V;
check(events, V) when V =:= default; V =:= detail ->
    event_set(V);
check(events, [_ | _] = V) when length(V) =< 64 ->
    [event_pattern(P) || P <- V];
check(buffer, {N, Size} = V) when is_integer(N), is_integer(Size) ->
    case pow2(N) andalso N >= 2 andalso N =< 1024 andalso pow2(Size) andalso Size >= 4096
        andalso Size =< 64 bsl 20 andalso N * Size =< 1 bsl 30 of
        true -> V;
        false -> throw({badopt, buffer, V})
    end;
check(triggers, V) when is_list(V), length(V) =< ?MAX_TRIGGERS ->
    [trigger(T) || T <- V];
check(max_snapshots, V) when is_integer(V), V >= 1, V =< 1000 ->
    V;
check(min_interval_ms, V) when is_integer(V), V >= 0, V =< 86400000 ->
    V;
check(dir, V) when is_binary(V); is_list(V) ->
    case unicode:characters_to_list(V) of
        [_ | _] = Dir -> filename:absname(Dir);
        _ -> throw({badopt, dir, V})
    end;
check(timeout_ms, V) when is_integer(V), V >= 100, V =< 600000 ->
    V;
check(check_ms, V) when is_integer(V), V >= 100, V =< 3600000 ->
    V;
check(lttng, V) when is_binary(V); is_list(V) ->
    case unicode:characters_to_list(V) of
        [_ | _] = Exe -> Exe;
        _ -> throw({badopt, lttng, V})
    end;
check(K, V) ->
    throw({badopt, K, V}).

event_pattern(P) ->
    case to_binary(P) of
        {ok, B} ->
            case dtrace_recorder_lttng:match_events(B) of
                [_ | _] -> B;
                [] -> throw({badopt, events, P})
            end;
        error ->
            throw({badopt, events, P})
    end.

trigger({pn, Label, Filter} = T) when is_integer(Label), Label >= 0, Label =< 950,
                                       Label =/= ?MARK_LABEL ->
    {pn, Label, filter(<<"org_erlang_dtrace:user_trace_n">>, Filter, T)};
trigger({event, Name, Filter} = T) ->
    case to_binary(Name) of
        {ok, B} ->
            case dtrace_recorder_lttng:event_fields(B) of
                {ok, _} -> {event, B, filter(B, Filter, T)};
                error -> throw({badopt, triggers, T})
            end;
        error ->
            throw({badopt, triggers, T})
    end;
trigger(T) ->
    throw({badopt, triggers, T}).

%% A filter over Event's fields: no unknown field, balanced quotes, no
%% NUL or newline. LTTng checks the syntax when the trigger is added.
filter(Event, Filter, T) ->
    {ok, Fields} = dtrace_recorder_lttng:event_fields(Event),
    case to_binary(Filter) of
        {ok, F} when byte_size(F) =< 1024 ->
            Clean = binary:match(F, [<<0>>, <<"\n">>, <<"\r">>]) =:= nomatch,
            case Clean andalso dtrace_recorder_lttng:filter_fields(F) of
                {ok, Used} ->
                    case Used -- Fields of
                        [] -> F;
                        _ -> throw({badopt, triggers, T})
                    end;
                _ ->
                    throw({badopt, triggers, T})
            end;
        _ ->
            throw({badopt, triggers, T})
    end.

to_binary(V) when is_binary(V) ->
    case unicode:characters_to_binary(V) of
        B when is_binary(B) -> {ok, B};
        _ -> error
    end;
to_binary(V) when is_list(V) ->
    try unicode:characters_to_binary(V) of
        B when is_binary(B) -> {ok, B};
        _ -> error
    catch
        error:_ -> error
    end;
to_binary(_) ->
    error.

pow2(N) ->
    N > 0 andalso N band (N - 1) =:= 0.

%%% Names

%% @doc The node part of this node's LTTng names (see the module
%% documentation).
-spec node_part() -> nonempty_string().
node_part() ->
    case node() of
        nonode@nohost ->
            "nonode";
        Node ->
            Full = atom_to_list(Node),
            Clean = lists:sublist(clean(Full), 40),
            Clean ++ "_" ++ lists:flatten(io_lib:format("~8.16.0b", [erlang:phash2(Full, 1 bsl 32)]))
    end.

%% @doc The session name of recorder `Name' on this node.
-spec session_name(Name :: atom()) -> nonempty_string().
session_name(Name) ->
    "dtrace-rec-" ++ node_part() ++ "-" ++ clean(atom_to_list(Name)) ++ "-" ++ os:getpid().

%% @doc The name of recorder `Name''s directory (under the `dir' option):
%% the session name without the OS pid on a distributed node, so that the
%% node's next incarnation finds its snapshots; with it on a node without
%% distribution.
-spec dir_name(Name :: atom()) -> nonempty_string().
dir_name(Name) ->
    Base = "dtrace-rec-" ++ node_part() ++ "-" ++ clean(atom_to_list(Name)),
    case node() of
        nonode@nohost -> Base ++ "-" ++ os:getpid();
        _ -> Base
    end.

%% @doc The name of trigger `Index' (1, 2, ...), generation `Gen', of
%% session `Session'.
-spec trigger_name(Session :: string(), Index :: pos_integer(), Gen :: pos_integer()) -> string().
trigger_name(Session, Index, Gen) ->
    Session ++ "-t" ++ integer_to_list(Index) ++ "g" ++ integer_to_list(Gen).

%% @doc The parts of a session or trigger name of the recorder's:
%% `{session | trigger, NodePart, Recorder, OsPid}', or `other' for a name
%% that is not the recorder's.
-spec parse_session_name(Name :: binary() | string()) ->
          {session | trigger, string(), string(), string()} | other.
parse_session_name(Name) ->
    case string:split(unicode:characters_to_list(Name), "-", all) of
        ["dtrace", "rec", Node, Rec, Pid] when Node =/= [], Rec =/= [], Pid =/= [] ->
            {session, Node, Rec, Pid};
        ["dtrace", "rec", Node, Rec, Pid, [$t | _]] when Node =/= [], Rec =/= [], Pid =/= [] ->
            {trigger, Node, Rec, Pid};
        _ ->
            other
    end.

%% @doc Whether session or trigger `Name' is a leftover that recorder
%% `Recorder' of this node removes when it starts (see the module
%% documentation).
-spec leftover(Name :: binary() | string(), Recorder :: atom()) -> boolean().
leftover(Name, Recorder) ->
    Mine = node_part(),
    Me = os:getpid(),
    case parse_session_name(Name) of
        other ->
            false;
        {_, Mine, Rec, Pid} when Mine =/= "nonode" ->
            Rec =:= clean(atom_to_list(Recorder)) orelse dead(Pid, Me);
        {_, "nonode", Rec, Me} ->
            Rec =:= clean(atom_to_list(Recorder));
        {_, Node, _Rec, Pid} ->
            (Node =:= "nonode" orelse this_host(Node)) andalso dead(Pid, Me)
    end.

dead(Pid, Me) ->
    Pid =/= Me andalso Pid =/= [] andalso lists:all(fun(C) -> C >= $0 andalso C =< $9 end, Pid)
        andalso not filelib:is_dir("/proc/" ++ Pid).

%% NODE_HASH where NODE ends with this host's name (cleaned).
this_host(NodePart) ->
    case string:split(atom_to_list(node()), "@") of
        [_, Host] ->
            case string:split(NodePart, "_", trailing) of
                [Clean, _Hash] -> lists:suffix("_" ++ clean(Host), Clean);
                _ -> false
            end;
        _ ->
            false
    end.

clean(S) ->
    [case C of
         _ when C >= $a, C =< $z; C >= $A, C =< $Z; C >= $0, C =< $9 -> C;
         _ -> $_
     end || C <- S].
