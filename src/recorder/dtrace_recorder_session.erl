%%% @doc A flight recorder's LTTng session and what it does: the work of
%%% the recorder's jobs ({@link dtrace_recorder} runs each in a process of
%%% its own and keeps the state), on the session's context ({@link ctx()},
%%% made once by {@link context/1}), never on the recorder's state. With
%%% {@link dtrace_recorder_lttng} (the `lttng' commands and the catalogue
%%% of events) it holds everything the recorder knows of LTTng: the filter
%%% syntax of the event rules and triggers, the names of the events it
%%% records and triggers on (from the catalogue), and the names it gives
%%% its session, triggers and directories ({@link name/1}).
%%%
%%% == Names ==
%%% A recorder's session is `dtrace-rec-NODE-RECORDER-OSPID', where NODE
%%% is the node name (characters other than letters, digits and `_' turned
%%% into `_', at most 40 of them) followed by `_' and 8 hex digits of a
%%% hash of the full name, or `nonode' on a node without distribution;
%%% RECORDER is the recorder's registered name, likewise cleaned; OSPID the
%%% node's OS process id. Its triggers are `SESSION-tIgG' (trigger I of the
%%% options, generation G); its directory (under the `dir' option, and
%%% under a relay daemon's output) `dtrace-rec-NODE-RECORDER', with
%%% `-OSPID' on a node without distribution. `-' separates the parts and
%%% appears in no part, so a name says whose it is, and a recorder that
%%% starts removes by name ({@link sweep/1}):
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
%%%
%%% == Where snapshots go ==
%%% To the recorder's directory under the `dir' option, by default. With
%%% the `relay' option, to a relay daemon (`lttng-relayd'), which writes
%%% them under `HOSTNAME/dtrace-rec-NODE-RECORDER/' of its output
%%% directory (HOSTNAME: this host's name, as the session daemon sends it):
%%% the nodes of a cluster, on any hosts, leave their snapshots in one
%%% place, and those of several nodes of one host stay apart. With
%%% `relay_dir' (the relay's output directory as this node sees it: the
%%% relay runs on this host, or its output is mounted here) the recorder
%%% handles the relay's copies as it does local ones: it lists them,
%%% writes their sidecars, adopts its triggers' snapshots and deletes the
%%% oldest beyond `max_snapshots'. Without it the recorder cannot see
%%% them: see docs/recorder.md, "Snapshots to a relay daemon".
%%%
%%% A snapshot the relay does not take (down, too slow, its disk full) is
%%% taken again, at once, into the local directory (the ring buffers still
%%% hold it); the result says `relay => relay_down'.
%%% @end
-module(dtrace_recorder_session).

-export([context/1, name/1, owner/1, leftover/2, mark/2]).
-export([setup/1, sweep/1, trigger_state/3, rules/2, arm/2, rearm/3, disarm/2,
         take_snapshot/4, poll/1, adopt/3, delete/2, check/2, cleanup/1]).

-export_type([ctx/0, trigger/0]).

-type ctx() :: #{lttng := dtrace_recorder_lttng:ctx(),
                 recorder := atom(),
                 session := string(),
                 dir := string(),
                 output := dtrace_recorder_lttng:output(),
                 seen := string() | none,
                 relay := none | dtrace_recorder_lttng:relay(),
                 events := [binary()],
                 buffer := {pos_integer(), pos_integer()},
                 specs := [dtrace_recorder_opts:trigger_spec()],
                 os_pid := string()}.
%% The session's context: the `lttng' executable and timeout; the
%% recorder's name, its session's name and its local directory (`dir');
%% where its session writes snapshots (`output') and where this node sees
%% them (`seen': `dir'; with a relay, the relay's copy of its directory
%% under `relay_dir', or `none'); the relay; the events, buffers and
%% triggers of the options; the node's OS pid.
-type trigger() :: #{index := pos_integer(), gen := pos_integer(),
                     spec := dtrace_recorder_opts:trigger_spec(), name := string(),
                     event := binary(), filter := binary(), lttng_filter := binary(),
                     failures := non_neg_integer(), armed_at_ns := integer()}.
%% A trigger as added to LTTng: its place in the options (`index') and
%% generation, its name, its event and filter (`lttng_filter' with the
%% vpid condition), LTTng's count of its failed snapshots when last looked
%% at, and when it was added (ns since the epoch).

%% A snapshot's reason: at most this many bytes (a probe string over 1024
%% bytes would be recorded as NULL).
-define(REASON_MAX, 1000).
-define(READY_MS, 5000).
-define(SETTLE_MS, 100).
%% The processes named in a sidecar, at most (dtrace_names:live/1: about
%% 0.5 s for this many on OTP 25).
-define(SIDECAR_NAMES, 100000).

%%% The context and the names

%% @doc The context of the session of a recorder with checked options
%% `Conf' ({@link dtrace_recorder_opts:validate/1}).
-spec context(Conf :: dtrace_recorder_opts:conf()) -> ctx().
context(#{name := Name, dir := Base, lttng := Lttng, timeout_ms := Timeout, relay := Relay,
          relay_dir := RelayDir, events := Events, buffer := Buffer, triggers := Specs}) ->
    Dir = filename:join(Base, name({dir, Name})),
    {Output, Seen, RelayInfo} =
        case Relay of
            none ->
                {{file, Dir}, Dir, none};
            Url ->
                {ok, #{url := U} = R} = dtrace_recorder_lttng:relay_url(Url),
                {ok, Host} = inet:gethostname(),
                {{relay, U ++ "/" ++ name({dir, Name})},
                 case RelayDir of
                     none -> none;
                     _ -> filename:join([RelayDir, Host, name({dir, Name})])
                 end, R}
        end,
    #{lttng => #{lttng => Lttng, timeout => Timeout}, recorder => Name, session => name({session, Name}),
      dir => Dir, output => Output, seen => Seen, relay => RelayInfo, events => Events, buffer => Buffer,
      specs => Specs, os_pid => os:getpid()}.

%% @doc The recorder's LTTng names, all made here (see the module
%% documentation): `{session, Recorder}', the session of recorder
%% `Recorder' of this node; `{dir, Recorder}', its directory; `{trigger,
%% Session, Index, Gen}', trigger `Index' (1, 2, ...) of the options,
%% generation `Gen', of session `Session'. {@link owner/1} reads them back.
-spec name({session | dir, Recorder :: atom()} |
           {trigger, Session :: string(), Index :: pos_integer(), Gen :: pos_integer()}) -> nonempty_string().
name({session, Recorder}) ->
    base(Recorder) ++ "-" ++ os:getpid();
name({dir, Recorder}) ->
    case node() of
        nonode@nohost -> name({session, Recorder});
        _ -> base(Recorder)
    end;
name({trigger, Session, Index, Gen}) ->
    Session ++ "-t" ++ integer_to_list(Index) ++ "g" ++ integer_to_list(Gen).

base(Recorder) ->
    "dtrace-rec-" ++ node_part() ++ "-" ++ clean(atom_to_list(Recorder)).

%% @doc Whose a session or trigger name is, read back from {@link
%% name/1}'s format: `{session | trigger, NodePart, Recorder, OsPid}', or
%% `other' for a name that is not a recorder's.
-spec owner(Name :: binary() | string()) -> {session | trigger, string(), string(), string()} | other.
owner(Name) ->
    case string:split(unicode:characters_to_list(Name), "-", all) of
        ["dtrace", "rec", Node, Rec, Pid] when Node =/= [], Rec =/= [], Pid =/= [] ->
            {session, Node, Rec, Pid};
        ["dtrace", "rec", Node, Rec, Pid, [$t | _]] when Node =/= [], Rec =/= [], Pid =/= [] ->
            {trigger, Node, Rec, Pid};
        _ ->
            other
    end.

%% The node part of this node's names.
node_part() ->
    case node() of
        nonode@nohost ->
            "nonode";
        Node ->
            Full = atom_to_list(Node),
            Clean = lists:sublist(clean(Full), 40),
            Clean ++ "_" ++ lists:flatten(io_lib:format("~8.16.0b", [erlang:phash2(Full, 1 bsl 32)]))
    end.

%% @doc Whether session or trigger `Name' is a leftover that recorder
%% `Recorder' of this node removes when it starts (see the module
%% documentation).
-spec leftover(Name :: binary() | string(), Recorder :: atom()) -> boolean().
leftover(Name, Recorder) ->
    Mine = node_part(),
    Me = os:getpid(),
    case owner(Name) of
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

%% @doc The marker of a snapshot asked for (`Source': `manual' or
%% `cluster'), fired in the caller (it carries the caller's pid and tag):
%% `Reason' as a binary of at most 1000 bytes, and what the recorders need
%% to know about it.
-spec mark(manual | cluster, term()) -> #{atom() => term()}.
mark(Source, Reason) ->
    R = reason(Reason),
    Id = erlang:unique_integer([positive]),
    _ = fire_mark(Id, R, atom_to_binary(node())),
    #{source => Source, reason => R, origin => node(), mark_node => node(), mark_id => Id,
      tag => dtrace:get_tag_data()}.

reason(R) when is_binary(R) -> cut(R);
reason(R) when is_atom(R) -> cut(atom_to_binary(R));
reason(R) ->
    try unicode:characters_to_binary(R) of
        B when is_binary(B) -> cut(B);
        _ -> cut(iolist_to_binary(io_lib:format("~0tp", [R])))
    catch
        error:_ -> cut(iolist_to_binary(io_lib:format("~0tp", [R])))
    end.

%% At most ?REASON_MAX bytes, cut at a character boundary: a probe
%% string over 1024 bytes would be recorded as NULL.
cut(B) when byte_size(B) =< ?REASON_MAX -> B;
cut(B) ->
    case unicode:characters_to_binary(binary:part(B, 0, ?REASON_MAX)) of
        {incomplete, Good, _} -> Good;
        {error, Good, _} -> Good;
        Good -> Good
    end.

%% Fires the recorder's marker event, `dtrace:pn(949, Id,
%% "dtrace_recorder", Reason, Origin)' ({@link
%% dtrace_recorder_opts:mark_label/0}), in the calling process (so it
%% carries its pid and tag): a snapshot's reason, or, with `Id' 0 and
%% `Reason' `<<"recording">>', the probe that says the session records here.
%% The one place the marker is fired. Returns what `dtrace:pn/5' does:
%% whether a sink listened.
-spec fire_mark(non_neg_integer(), binary(), binary()) -> boolean().
fire_mark(Id, Reason, Origin) ->
    dtrace:pn(dtrace_recorder_opts:mark_label(), Id, <<"dtrace_recorder">>, Reason, Origin).

%%% Setting up

%% @doc Sets the session up: checks that this node loads liblttng-ust,
%% removes leftovers ({@link sweep/1}), checks that the local directory is
%% writable, creates and starts the session, waits until it records in
%% this node, and adds the triggers. With a relay, also looks whether the
%% relay accepts connections (`relay': `up', or `{relay_down, Why}'; the
%% session is set up either way: LTTng connects to the relay for each
%% snapshot). Returns `{ok, #{triggers, found, stamp, relay}}' (`found':
%% the snapshots an earlier incarnation left, with their sidecars;
%% `stamp': the session's creation time, in its triggers' snapshot names),
%% or `{error, Reason}' with nothing of the session left.
-spec setup(Ctx :: ctx()) ->
          {ok, #{triggers := [trigger()], found := [dtrace_recorder:snapshot()], stamp := string(),
                 relay := none | up | {relay_down, term()}}}
          | {error, term()}.
setup(#{lttng := L, session := Session, dir := Dir, output := Output, buffer := Buffer,
        specs := Specs} = Ctx) ->
    Steps = [fun() -> sink() end,
             fun() -> sweep(Ctx) end,
             fun() -> case dtrace_recorder_store:check_writable(Dir) of
                          ok -> ok;
                          {error, Posix} -> {error, {dir, unicode:characters_to_binary(Dir), Posix}}
                      end
             end],
    case run_steps(Steps) of
        ok ->
            Triggers = [trigger_state(Ctx, I, Spec) || {I, Spec} <- lists:zip(lists:seq(1, length(Specs)), Specs)],
            Stamp = integer_to_list(erlang:system_time(millisecond)),
            case dtrace_recorder_lttng:create(L, Session, {Output, "t" ++ Stamp}, Buffer,
                                              rules(Ctx, Triggers)) of
                ok ->
                    %% The session records in this node before any trigger
                    %% is armed: a trigger's event notifier enables the same
                    %% tracepoints, so the mark would say "enabled" while
                    %% the session's buffers are not yet there (seen on a
                    %% fresh machine: a trigger's snapshot with no events).
                    case wait_recording() of
                        ok ->
                            case arm(Ctx, Triggers) of
                                {ok, Armed} ->
                                    {ok, #{triggers => Armed, found => found(Ctx), stamp => Stamp,
                                           relay => relay_state(Ctx)}};
                                {error, Why, _Armed} ->
                                    _ = cleanup(Ctx),
                                    badopt_filter({error, Why}, Specs)
                            end;
                        Error ->
                            _ = cleanup(Ctx),
                            Error
                    end;
                Error ->
                    badopt_filter(Error, Specs)
            end;
        Error ->
            Error
    end.

relay_state(#{relay := none}) ->
    none;
relay_state(#{relay := #{url := Url} = Relay, lttng := #{timeout := T}}) ->
    case dtrace_recorder_lttng:relay_probe(Relay, min(T, 5000)) of
        ok -> up;
        {error, Why} -> {relay_down, {unreachable, list_to_binary(Url), Why}}
    end.

%% A filter LTTng refused is a bad option: the trigger whose filter it is.
badopt_filter({error, {bad_filter, Command, _}} = Error, Specs) ->
    case [S || {_, _, F} = S <- Specs, F =/= <<>>, binary:match(Command, F) =/= nomatch] of
        [Spec | _] -> {error, {badopt, triggers, Spec}};
        [] -> Error
    end;
badopt_filter(Error, _Specs) ->
    Error.

run_steps([]) -> ok;
run_steps([F | Rest]) ->
    case F() of
        ok -> run_steps(Rest);
        Error -> Error
    end.

sink() ->
    case dtrace:sinks() of
        #{lttng := true} -> ok;
        #{lttng := {false, Why}} -> {error, {lttng_sink, Why}}
    end.

%% @doc Removes, by name, what an earlier incarnation of this recorder
%% left, and what recorders of dead nodes of this host left (see the
%% module documentation): their sessions, then their triggers. `ok' or the
%% first error.
-spec sweep(Ctx :: ctx()) -> ok | {error, dtrace_recorder_lttng:error_reason()}.
sweep(#{lttng := L, recorder := Recorder}) ->
    case dtrace_recorder_lttng:sessions(L) of
        {ok, Sessions} ->
            Old = [S || S <- Sessions, leftover(S, Recorder)],
            case destroy_all(L, Old) of
                ok ->
                    case dtrace_recorder_lttng:triggers(L) of
                        {ok, Ts} ->
                            remove_all(L, [N || {N, _} <- Ts, leftover(N, Recorder)]);
                        Error ->
                            Error
                    end;
                Error ->
                    Error
            end;
        Error ->
            Error
    end.

destroy_all(_L, []) -> ok;
destroy_all(L, [S | Rest]) ->
    case dtrace_recorder_lttng:destroy(L, S) of
        ok -> destroy_all(L, Rest);
        Error -> Error
    end.

remove_all(_L, []) -> ok;
remove_all(L, [N | Rest]) ->
    case dtrace_recorder_lttng:remove_trigger(L, N) of
        ok -> remove_all(L, Rest);
        Error -> Error
    end.

%%% Triggers and event rules

%% @doc Trigger `Index' of the options, `Spec', in its first generation:
%% its name, its event (the numbered user probes' event of the catalogue
%% for `{pn, Label, Filter}') and its filter, in LTTng's filter syntax,
%% restricted to this node's OS process.
-spec trigger_state(Ctx :: ctx(), Index :: pos_integer(), Spec :: dtrace_recorder_opts:trigger_spec()) ->
          trigger().
trigger_state(Ctx, I, Spec) ->
    trigger_state(Ctx, I, 1, Spec).

trigger_state(#{session := Session, os_pid := Pid}, I, Gen, Spec) ->
    {Event, Filter} = case Spec of
                          {pn, Label, F} ->
                              {numbered_event(), iolist_to_binary(["label == ", integer_to_list(Label), paren(F)])};
                          {event, E, <<>>} ->
                              {E, <<>>};
                          {event, E, F} ->
                              {E, iolist_to_binary(["(", F, ")"])}
                      end,
    Full = case Filter of
               <<>> -> iolist_to_binary(["$ctx.vpid == ", Pid]);
               _ -> iolist_to_binary([Filter, " && $ctx.vpid == ", Pid])
           end,
    #{index => I, gen => Gen, spec => Spec, name => name({trigger, Session, I, Gen}),
      event => Event, filter => Filter, lttng_filter => Full, failures => 0, armed_at_ns => 0}.

paren(<<>>) -> [];
paren(F) -> [" && (", F, ")"].

numbered_event() ->
    {ok, Event} = dtrace_recorder_lttng:numbered_event(),
    Event.

%% @doc The session's event rules, `[{Patterns, Filter}]': the events
%% asked for, filtered on this OS process; plus, for an event they do not
%% cover, a rule that records the recorder's marker events and the events
%% the triggers `Triggers' fire on.
-spec rules(Ctx :: ctx(), Triggers :: [trigger()]) -> [{[binary()], binary()}].
rules(#{events := Events, os_pid := Pid}, Triggers) ->
    Vpid = iolist_to_binary(["$ctx.vpid == ", Pid]),
    Covered = lists:usort(lists:append([dtrace_recorder_lttng:match_events(E) || E <- Events])),
    Mark = {numbered_event(), iolist_to_binary(["label == ", integer_to_list(dtrace_recorder_opts:mark_label())])},
    Extra = [{E, F} || {E, F} <- [Mark | [{E, F} || #{event := E, filter := F} <- Triggers]],
                       not lists:member(E, Covered)],
    ByEvent = maps:groups_from_list(fun({E, _}) -> E end, fun({_, F}) -> F end, Extra),
    [{Events, Vpid}
     | [{[E], iolist_to_binary([Vpid, " && (", lists:join(" || ", [any(F) || F <- Fs]), ")"])}
        || {E, Fs} <- lists:sort(maps:to_list(ByEvent))]].

any(<<>>) -> <<"1">>;
any(F) -> ["(", F, ")"].

%% @doc Adds each trigger of `Triggers' (each snapshots the session, once:
%% LTTng rate policy `once-after:1'). `{ok, Armed}' (with the time each
%% was added), or `{error, Why, AddedSoFar}' at the first failure.
-spec arm(Ctx :: ctx(), Triggers :: [trigger()]) -> {ok, [trigger()]} | {error, term(), [trigger()]}.
arm(Ctx, Triggers) ->
    arm(Ctx, Triggers, []).

arm(_Ctx, [], Acc) ->
    {ok, lists:reverse(Acc)};
arm(#{lttng := L, session := Session} = Ctx, [#{name := Name, event := Event, lttng_filter := F} = T | Rest], Acc) ->
    At = os:system_time(nanosecond),
    case dtrace_recorder_lttng:add_trigger(L, Name, Session, Event, F) of
        ok -> arm(Ctx, Rest, [T#{armed_at_ns => At, failures => 0} | Acc]);
        {error, Why} -> {error, Why, Acc}
    end.

%% @doc Each trigger of `Triggers' again, as a new generation, added
%% before the old one is removed (unless `WereArmed' is false: disarmed):
%% no moment without it. `{ok, Armed}' or `{error, Why}' (the new ones
%% added so far removed again).
-spec rearm(Ctx :: ctx(), Triggers :: [trigger()], WereArmed :: boolean()) -> {ok, [trigger()]} | {error, term()}.
rearm(#{lttng := L} = Ctx, Triggers, WereArmed) ->
    New = [trigger_state(Ctx, I, G + 1, Spec) || #{index := I, gen := G, spec := Spec} <- Triggers],
    case arm(Ctx, New) of
        {ok, Armed} ->
            _ = WereArmed andalso remove_all(L, [N || #{name := N} <- Triggers]),
            {ok, Armed};
        {error, Why, Armed} ->
            _ = remove_all(L, [N || #{name := N} <- Armed]),
            {error, Why}
    end.

%% @doc Removes the triggers `Triggers' (they stay in the recorder's state,
%% to be re-armed). `ok' or the first error.
-spec disarm(Ctx :: ctx(), Triggers :: [trigger()]) -> ok | {error, dtrace_recorder_lttng:error_reason()}.
disarm(#{lttng := L}, Triggers) ->
    remove_all(L, [N || #{name := N} <- Triggers]).

%% The session daemon enables the session's events in this process
%% asynchronously: wait until the marker's event is enabled here.
wait_recording() ->
    wait_recording(erlang:monotonic_time(millisecond) + ?READY_MS).

wait_recording(Deadline) ->
    case fire_mark(0, <<"recording">>, atom_to_binary(node())) of
        true ->
            ok;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true ->
                    {error, {not_recording,
                             iolist_to_binary([<<"the session daemon did not enable the session's events in "
                                                 "this node within 5 s: run lttng-sessiond as this node's "
                                                 "user (or root)">>])}};
                false ->
                    timer:sleep(10),
                    wait_recording(Deadline)
            end
    end.

%%% Snapshots

%% Snapshots of an earlier incarnation, with their sidecars, where this
%% node sees them (its directory, and the relay's copy of it). One the
%% recorder asked for without a sidecar was never finished: deleted. A
%% trigger's without one is left to the poll, which adopts it.
found(Ctx) ->
    lists:append([case {dtrace_recorder_store:read_sidecar(P), K} of
                      {{ok, M}, _} -> [found_snapshot(P, M)];
                      {error, manual} -> _ = dtrace_recorder_store:delete(P), [];
                      {error, trigger} -> []
                  end || D <- seen_dirs(Ctx), #{path := P, kind := K} <- dtrace_recorder_store:scan(D)]).

seen_dirs(#{dir := Dir, seen := Dir}) -> [Dir];
seen_dirs(#{dir := Dir, seen := none}) -> [Dir];
seen_dirs(#{dir := Dir, seen := Seen}) -> [Seen, Dir].

found_snapshot(Path, M) ->
    S = #{path => unicode:characters_to_binary(Path),
          time => maps:get(<<"time_ms">>, M, 0),
          reason => maps:get(<<"reason">>, M, <<>>),
          source => binary_to_atom(maps:get(<<"source">>, M, <<"trigger">>)),
          node => binary_to_atom(maps:get(<<"node">>, M, atom_to_binary(node()))),
          bytes => element(1, dtrace_recorder_store:dir_info(Path))},
    case M of
        #{<<"relay">> := R} when R =:= <<"sent">>; R =:= <<"relay_down">> -> S#{relay => binary_to_atom(R)};
        _ -> S
    end.

snapshot(Path, Meta) ->
    S = #{path => unicode:characters_to_binary(Path),
          time => maps:get(time_ms, Meta),
          reason => maps:get(reason, Meta),
          source => maps:get(source, Meta),
          node => maps:get(node, Meta),
          bytes => element(1, dtrace_recorder_store:dir_info(Path))},
    case Meta of
        #{relay := R} -> S#{relay => R};
        _ -> S
    end.

%% @doc Takes a snapshot now, named `mSTAMPnID' (`Stamp': the session's,
%% from {@link setup/1}), for request `Info' (from dtrace_recorder: its
%% source and reason; the marker event, fired here with the asker's tag
%% when the asker is on another node), and writes sidecar `Meta' next to
%% it. To the session's output; with a relay that does not take it, again
%% into the local directory. Returns `{ok, Snapshot}', `{ok, Snapshot,
%% {relay_down, Why}}' (taken locally; `Snapshot' says `relay =>
%% relay_down'), or `{error, Reason}' with no partial snapshot left where
%% this node can see it.
-spec take_snapshot(Ctx :: ctx(), Stamp :: string(), Info :: map(), Meta :: map()) ->
          {ok, dtrace_recorder:snapshot()} | {ok, dtrace_recorder:snapshot(), {relay_down, term()}}
          | {error, term()}.
take_snapshot(#{lttng := L, session := Session} = Ctx, Stamp, Info, Meta0) ->
    Id = erlang:unique_integer([positive]),
    Meta = case Info of
               #{mark_node := N, mark_id := MarkId} when N =:= node() ->
                   Meta0#{mark_id => MarkId};
               #{source := trigger} ->
                   %% A trigger's snapshot taken again (its own failed): the
                   %% triggering event is in it, no marker.
                   Meta0;
               _ ->
                   %% Asked from another node: the marker is fired here, with
                   %% the asker's tag.
                   _ = dtrace:put_tag(maps:get(tag, Info)),
                   _ = fire_mark(Id, maps:get(reason, Info), atom_to_binary(maps:get(origin, Info))),
                   Meta0#{mark_id => Id}
           end,
    Prefix = "m" ++ Stamp ++ "n" ++ integer_to_list(Id),
    case dtrace_recorder_lttng:snapshot(L, Session, Prefix) of
        ok -> sent(Ctx, Prefix, Meta);
        {error, Why} -> not_sent(Ctx, Prefix, Meta, Why)
    end.

sent(#{relay := none, dir := Dir}, Prefix, Meta) ->
    written(Dir, Prefix, Meta);
sent(#{seen := none} = Ctx, Prefix, Meta) ->
    %% Sent; the relay's copy is out of this node's sight.
    {ok, relayed(Ctx, Prefix, Meta)};
sent(#{seen := Seen} = Ctx, Prefix, Meta) ->
    case settled(Seen, Prefix, deadline(Ctx)) of
        ok ->
            case written(Seen, Prefix, Meta#{relay => sent}) of
                {ok, _} = Sent ->
                    Sent;
                {error, Why} ->
                    %% No room for the sidecar (the relay's disk filled up
                    %% with this very snapshot, which may then be cut
                    %% short): its copy deleted, taken locally.
                    remove_partial(Seen, Prefix),
                    locally(Ctx, Prefix, Meta, Why)
            end;
        error ->
            remove_partial(Seen, Prefix),
            locally(Ctx, Prefix, Meta, {relay_incomplete, unicode:characters_to_binary(Seen)})
    end.

not_sent(#{relay := none, dir := Dir}, Prefix, _Meta, Why) ->
    remove_partial(Dir, Prefix),
    {error, Why};
not_sent(_Ctx, _Prefix, _Meta, {Fatal, _} = Why) when Fatal =:= no_session_daemon; Fatal =:= lttng_missing ->
    {error, Why};
not_sent(#{seen := Seen} = Ctx, Prefix, Meta, Why) ->
    _ = Seen =:= none orelse remove_partial(Seen, Prefix),
    locally(Ctx, Prefix, Meta, Why).

%% The relay did not take the snapshot: the same, into the local
%% directory (LTTng copies the ring buffers; they still hold it).
locally(#{lttng := L, session := Session, dir := Dir}, Prefix, Meta, RelayWhy) ->
    case dtrace_recorder_lttng:snapshot(L, Session, Prefix, {file, Dir}) of
        ok ->
            case written(Dir, Prefix, Meta#{relay => relay_down}) of
                {ok, Snap} -> {ok, Snap, {relay_down, RelayWhy}};
                Error -> Error
            end;
        {error, Why} ->
            remove_partial(Dir, Prefix),
            {error, Why}
    end.

%% A snapshot LTTng wrote into Dir: found, its sidecar written.
written(Dir, Prefix, Meta) ->
    case dtrace_recorder_store:find_manual(Dir, Prefix) of
        {ok, Name} ->
            Path = filename:join(Dir, Name),
            case dtrace_recorder_store:write_sidecar(Path, with_names(Meta)) of
                ok ->
                    {ok, snapshot(Path, Meta)};
                {error, Why} ->
                    _ = dtrace_recorder_store:delete(Path),
                    {error, {sidecar, Why}}
            end;
        error ->
            {error, {snapshot_not_found, unicode:characters_to_binary(Dir)}}
    end.

%% Meta with the names of this node's live processes (up to
%% ?SIDECAR_NAMES; dtrace_names:live/1), which dtrace-recorder-report
%% prints beside their pids. Taken as the sidecar is written: a process
%% that ended before has no name there.
with_names(Meta) ->
    Meta#{names => dtrace_names:live(?SIDECAR_NAMES)}.

%% A snapshot sent to a relay this node cannot see: its place there,
%% relative to the relay's output directory.
relayed(#{recorder := Recorder}, Prefix, Meta) ->
    {ok, Host} = inet:gethostname(),
    #{path => unicode:characters_to_binary(filename:join([Host, name({dir, Recorder}), Prefix ++ "-*"])),
      time => maps:get(time_ms, Meta), reason => maps:get(reason, Meta), source => maps:get(source, Meta),
      node => maps:get(node, Meta), bytes => 0, relay => sent}.

remove_partial(Dir, Prefix) ->
    _ = case dtrace_recorder_store:find_manual(Dir, Prefix) of
            {ok, Name} -> dtrace_recorder_store:delete(filename:join(Dir, Name));
            error -> ok
        end,
    ok.

deadline(#{lttng := #{timeout := T}}) ->
    erlang:monotonic_time(millisecond) + T.

%% A relay writes what it receives after `lttng snapshot record' returned:
%% the snapshot is there once LTTng's metadata is and its size stays the
%% same across two looks ?SETTLE_MS apart.
settled(Dir, Prefix, Deadline) ->
    settled(Dir, Prefix, Deadline, undefined).

settled(Dir, Prefix, Deadline, Last) ->
    Now = case dtrace_recorder_store:find_manual(Dir, Prefix) of
              {ok, Name} -> dtrace_recorder_store:dir_info(filename:join(Dir, Name));
              error -> {0, false}
          end,
    case Now of
        {Size, true} when Size > 0, Now =:= Last ->
            ok;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true ->
                    error;
                false ->
                    timer:sleep(?SETTLE_MS),
                    settled(Dir, Prefix, Deadline, Now)
            end
    end.

%% @doc The triggers' snapshots where this node sees them, `[{Name, {Size,
%% HasMetadata}}]' (none when it cannot see them).
-spec poll(Ctx :: ctx()) -> [{string(), {non_neg_integer(), boolean()}}].
poll(#{seen := none}) ->
    [];
poll(#{seen := Seen}) ->
    [{N, dtrace_recorder_store:dir_info(P)} || #{name := N, kind := trigger, path := P}
                                                   <- dtrace_recorder_store:scan(Seen)].

%% @doc Adopts trigger snapshot `Name' (found by {@link poll/1}): writes
%% its sidecar `Meta'. `{ok, Snapshot}', or `{error, {sidecar, Posix}}'
%% with the snapshot deleted.
-spec adopt(Ctx :: ctx(), Name :: string(), Meta :: map()) -> {ok, dtrace_recorder:snapshot()} | {error, term()}.
adopt(#{seen := Seen} = Ctx, Name, Meta0) ->
    Path = filename:join(Seen, Name),
    Meta = case Ctx of
               #{relay := none} -> Meta0;
               _ -> Meta0#{relay => sent}
           end,
    case dtrace_recorder_store:write_sidecar(Path, with_names(Meta)) of
        ok -> {ok, snapshot(Path, Meta)};
        {error, Why} -> _ = dtrace_recorder_store:delete(Path), {error, {sidecar, Why}}
    end.

%% @doc Deletes the snapshots at `Paths' (absolute paths: a snapshot on
%% a relay this node cannot see, listed by its place there, a relative
%% path, stays there).
-spec delete(Ctx :: ctx(), Paths :: [file:filename()]) -> [ok | {error, term()}].
delete(_Ctx, Paths) ->
    [dtrace_recorder_store:delete(P) || P <- Paths, filename:pathtype(P) =:= absolute].

%%% Health and cleanup

%% @doc The session's state (`active', `inactive', `missing') and, when it
%% records and has triggers, every trigger of this user with LTTng's count
%% of its failed actions: `{ok, #{session, triggers}}' or an lttng error.
-spec check(Ctx :: ctx(), Triggers :: [trigger()]) ->
          {ok, #{session := active | inactive | missing, triggers := [{binary(), non_neg_integer()}]}}
          | {error, dtrace_recorder_lttng:error_reason()}.
check(#{lttng := L, session := Session}, Triggers) ->
    case dtrace_recorder_lttng:session_state(L, Session) of
        {ok, State} when State =/= active; Triggers =:= [] ->
            {ok, #{session => State, triggers => []}};
        {ok, active} ->
            case dtrace_recorder_lttng:triggers(L) of
                {ok, Ts} -> {ok, #{session => active, triggers => Ts}};
                Error -> Error
            end;
        Error ->
            Error
    end.

%% @doc Destroys the session and removes its triggers, found by name (a
%% re-arming job killed half-way may have added one the recorder's state
%% does not know); stops at the first timeout (lttng hangs: the next
%% incarnation removes the rest by name).
-spec cleanup(Ctx :: ctx()) -> ok | {error, dtrace_recorder_lttng:error_reason()}.
cleanup(#{lttng := L, session := Session}) ->
    case dtrace_recorder_lttng:destroy(L, Session) of
        {error, {lttng_timeout, _}} = Error ->
            Error;
        _ ->
            case dtrace_recorder_lttng:triggers(L) of
                {ok, Ts} ->
                    {session, Node, Rec, Pid} = owner(Session),
                    lists:foldl(fun(_, {error, {lttng_timeout, _}} = Error) -> Error;
                                   (N, _) -> dtrace_recorder_lttng:remove_trigger(L, N)
                                end, ok, [N || {N, _} <- Ts, owner(N) =:= {trigger, Node, Rec, Pid}]);
                Error ->
                    Error
            end
    end.
