%%% @doc The flight recorder's options ({@link dtrace_recorder:start/1}):
%%% checked, and completed with their defaults, with what they name that is
%%% the recorder's own: the event sets ({@link event_set/1}) and the
%%% marker's label ({@link mark_label/0}). What the options become in LTTng
%%% (names, event rules, filters, the relay's URL) is {@link
%%% dtrace_recorder_lttng}'s, and the patterns, fields and URLs are checked
%%% against what it says: the options sit below the session, which reads
%%% them, and above LTTng's CLI.
%%% @end
-module(dtrace_recorder_opts).

-export([validate/1, defaults/0, mark_label/0, event_set/1]).

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
                  lttng := string(),
                  relay := none | string(),
                  relay_dir := none | string()}.

-define(MAX_TRIGGERS, 16).

%% @doc The label of `dtrace:pn/N' the recorder fires its marker events
%% with (the reason of a snapshot): 949. Triggers on it are refused.
-spec mark_label() -> 949.
mark_label() ->
    949.

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

%% @doc The options' defaults. `dir' defaults to the user cache directory
%% (`filename:basedir(user_cache, "dtrace_recorder")', i.e.
%% `$XDG_CACHE_HOME/dtrace_recorder' or `~/.cache/dtrace_recorder');
%% `relay' and `relay_dir' to `none' (snapshots in `dir').
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
      lttng => "lttng",
      relay => none,
      relay_dir => none}.

%% @doc Checks the options map `Opts' of {@link dtrace_recorder:start/1}
%% and completes it with the defaults. Returns `{error, {badopt, Key,
%% Value}}' for an unknown key or a bad value, where `Value' is the
%% offending element for list options (one event pattern, one trigger);
%% `relay_dir' without `relay' is a bad `relay_dir'.
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
        #{relay := none, relay_dir := Dir} when Dir =/= none -> {error, {badopt, relay_dir, maps:get(relay_dir, Opts)}};
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
check(relay, none) ->
    none;
check(relay, V) when is_binary(V); is_list(V) ->
    case dtrace_recorder_lttng:relay_url(V) of
        {ok, #{url := Url}} -> Url;
        error -> throw({badopt, relay, V})
    end;
check(relay_dir, none) ->
    none;
check(relay_dir, V) when is_binary(V); is_list(V) ->
    case unicode:characters_to_list(V) of
        [_ | _] = Dir -> filename:absname(Dir);
        _ -> throw({badopt, relay_dir, V})
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

trigger({pn, Label, Filter} = T) when is_integer(Label), Label >= 0, Label =< 950 ->
    case {Label =:= mark_label(), dtrace_recorder_lttng:numbered_event()} of
        {false, {ok, Event}} -> {pn, Label, filter(Event, Filter, T)};
        _ -> throw({badopt, triggers, T})
    end;
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
