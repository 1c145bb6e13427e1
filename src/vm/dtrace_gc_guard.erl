%%% @private
%%% @doc Never two trace sessions tracing one process for
%%% `garbage_collection' on a VM where that crashes (OTP-20385: {@link
%%% affected/0}). Only the library's own tracing is held back: another
%%% session's flags are read, never changed.
%%%
%%% Two setters of the flag check first, and each leaves a process to a
%%% session that already traces its GC: automatic mode (dtrace_vm, per
%%% process as it turns GC on, then per poll the processes it held back
%%% and new processes) and a span (dtrace_span_trace, on its own process).
%%% Their check-then-set would race (each sees the other not there yet,
%%% then both set it), so they meet in a table that dtrace_vm owns, whose
%%% one lock orders every access: a span first marks its process, then
%%% reads whether automatic mode's GC is on; automatic mode first marks
%%% its GC on, then skips a process a span marked. Whatever the order, one
%%% of them sees the other. A mark a killed span's process left holds
%%% back only that (dead) pid, until automatic mode next turns GC on.
%%% @end
-module(dtrace_gc_guard).

-export([affected/0, start/0, own/1, auto/3, held_back/1, other_gc/2, span/2]).

-export_type([auto/0]).

%% Automatic mode's GC: off, or on with new processes traced for it
%% (ours) or left to another session (held), and the processes held
%% back.
-type auto() :: off | {on, New :: ours | held, Held :: [pid()]}.
%% How automatic mode traces (dtrace_vm's tracing()): in its sessions, or
%% as the legacy session's tracer {dtrace_tracer, []}.
-type tracing() :: {session, Auto :: term(), Meta :: term()} | legacy.

%% The trace module exists from OTP 27 on; these are called only where the
%% VM has sessions (affected/0 is false without them).
%% OTP 25's spec of erlang:trace_info/2 lacks the {tracer, {Module, State}}
%% it returns for a tracer module (as dtrace_vm notes).
-dialyzer({nowarn_function, [sessions_of/1, gc_in/2, set/3]}).

-define(TABLE, dtrace_gc_guard).
-define(AFFECTED, {?MODULE, affected}).
%% The most processes held back asked again at one poll.
-define(RECHECK, 1000).

%% @doc Does a process traced for `garbage_collection' by two trace
%% sessions crash this VM? Computed once, kept in persistent_term.
-spec affected() -> boolean().
affected() ->
    case persistent_term:get(?AFFECTED, undefined) of
        undefined ->
            A = affected(erlang:function_exported(erts_internal, trace_session_create, 3),
                         version(erlang:system_info(version))),
            persistent_term:put(?AFFECTED, A),
            A;
        A ->
            A
    end.

%% The rule, from whether the VM has trace sessions and the erts version.
%% OTP-20385 (erlang/otp issue #11624, PR #11623): trace_gc() in
%% erl_trace.c frees the collection's info term inside its loop over the
%% sessions that trace the process, and the next session reads freed
%% memory (a pid tracer's node segfaults at the first collection). Came
%% with sessions in OTP 27.0 (erts 15.0); fixed in erts 17.1.1 (OTP
%% 29.1.2). Every erts 15 (OTP 27) and 16 (OTP 28) counts as affected:
%% when a patch of OTP 27 or 28 ships the fix (its release notes name
%% OTP-20385), add a clause above the last returning false from that erts
%% version on in its line, e.g. for a fix in erts 16.0.4.2:
%% `affected(true, [16 | _] = V) when V >= [16, 0, 4, 2] -> false;'.
affected(false, _Version) -> false;
affected(true, Version) -> Version < [17, 1, 1].

%% "15.2.7" or "15.2.7.1" as [15, 2, 7] and [15, 2, 7, 1]; a part that is
%% not a number ends it (so an odd version counts as an old one).
version(Text) ->
    lists:takewhile(fun is_integer/1,
                    [try list_to_integer(P) catch error:badarg -> bad end || P <- string:lexemes(Text, ".")]).

%% @doc Creates the table, owned by the caller (dtrace_vm, on an affected
%% VM): it lives as long as automatic mode's process, whose session it
%% guards.
-spec start() -> ok.
start() ->
    _ = ets:new(?TABLE, [named_table, public, set]),
    ok.

%% @doc The weak reference of a session's handle (`{Name, Id}', as
%% trace:session_info/1 lists it), or the legacy session's.
-spec own(legacy | {term(), term()}) -> term().
own(legacy) -> {legacy, default};
own({_Strong, Weak}) -> Weak.

%% @doc Automatic mode's GC on an affected VM, at each poll, after its
%% other flags were set (they never carry garbage_collection there) or
%% removed (garbage_collection too): `Want' is garbage_collection among
%% its process flags now, `Tracing' how it traces. Turning on: marked in
%% the table, then new processes (unless another session traces them for
%% GC) and each process that may have it (auto_may_trace/2); the others
%% are held back. At each later poll only the processes held back are
%% asked again (at most ?RECHECK), and whether another session traces new
%% processes for GC:
%% when it stopped, every process is asked again (those spawned meanwhile
%% lack it); when it started, new processes are left to it.
-spec auto(Want :: boolean(), auto(), tracing()) -> auto().
auto(false, off, _Tracing) ->
    off;
auto(false, _, _Tracing) ->
    _ = ets:delete(?TABLE, auto_gc),
    off;
auto(true, Gc, Tracing) ->
    auto_on(Gc, own(case Tracing of {session, Auto, _} -> Auto; legacy -> legacy end),
         fun(Target, On) -> set(Tracing, Target, On) end).

auto_on(off, Own, Set) ->
    true = ets:insert(?TABLE, {auto_gc}),
    %% Marks of killed spans' processes (a pid may be reused).
    _ = [ets:delete(?TABLE, P) || {P} <- ets:tab2list(?TABLE), is_pid(P), not is_process_alive(P)],
    New = case other_gc(new_processes, Own) of
              true -> held;
              false -> ok = Set(new, true), ours
          end,
    {on, New, pass(processes(), Own, Set)};
auto_on({on, New, Held}, Own, Set) ->
    case {New, other_gc(new_processes, Own)} of
        {held, false} -> ok = Set(new, true), {on, ours, pass(processes(), Own, Set)};
        {ours, true} -> ok = Set(new, false), {on, held, recheck(Held, Own, Set)};
        _ -> {on, New, recheck(Held, Own, Set)}
    end.

%% The first ?RECHECK processes held back are asked again, then go last
%% if still held: a poll's cost stays bounded when another session traces
%% every process for GC.
recheck(Held, Own, Set) when length(Held) =< ?RECHECK ->
    pass(Held, Own, Set);
recheck(Held, Own, Set) ->
    {Now, Later} = lists:split(?RECHECK, Held),
    Later ++ pass(Now, Own, Set).

%% Sets (true) or removes (false) garbage_collection on new processes, or
%% sets it on one process (gone: nothing to do). Without sessions only
%% where the tracer is {dtrace_tracer, []} or none (dtrace_vm's set_new/4).
set({session, Auto, _}, Target, On) ->
    _ = try trace:process(Auto, Target, On, [garbage_collection]) catch error:badarg -> 0 end,
    ok;
set(legacy, Target, On) ->
    Spec = case Target of new -> new_processes; Pid -> Pid end,
    _ = case erlang:trace_info(Spec, tracer) of
            {tracer, T} when T =:= []; T =:= {dtrace_tracer, []} ->
                try erlang:trace(Spec, On, [garbage_collection, {tracer, dtrace_tracer, []}]) catch error:badarg -> 0 end;
            _ ->
                0
        end,
    ok.

%% Sets GC on each of Pids that may have it; returns the others, alive.
pass(Pids, Own, Set) ->
    [P || P <- Pids, not (auto_may_trace(P, Own) andalso Set(P, true) =:= ok), is_process_alive(P)].

%% May automatic mode trace Pid for GC now: no span of its is checking
%% (the table says automatic mode's GC is on before this is asked), and
%% no other session traces it for GC?
auto_may_trace(Pid, Own) ->
    not ets:member(?TABLE, Pid) andalso not other_gc(Pid, Own).

%% @doc What the status map says of auto/3's state: how many processes
%% are held back now, and whether new processes are.
-spec held_back(auto()) -> #{processes := non_neg_integer(), new_processes := boolean()}.
held_back(off) ->
    #{processes => 0, new_processes => false};
held_back({on, New, Held}) ->
    #{processes => length([P || P <- Held, is_process_alive(P)]), new_processes => New =:= held}.

%% @doc Does a session other than `Own' (a session's weak reference,
%% `{Name, Id}', or `{legacy, default}') trace `Target' (a process, or
%% `new_processes') for `garbage_collection'? The legacy session is read
%% with erlang:trace_info/2 (trace:info/3 refuses it).
-spec other_gc(pid() | new_processes, Own :: term()) -> boolean().
other_gc(Target, Own) ->
    lists:any(fun(W) -> W =/= Own andalso gc_in(W, Target) end, sessions_of(Target)).

sessions_of(Target) ->
    case trace:session_info(Target) of
        L when is_list(L) -> L;
        undefined -> []
    end.

gc_in({legacy, default}, Target) ->
    has_gc(erlang:trace_info(Target, flags));
gc_in(Session, Target) ->
    %% A session destroyed since session_info/1 is refused: it traces
    %% nothing.
    try trace:info(Session, Target, flags) of
        Flags -> has_gc(Flags)
    catch
        error:badarg -> false
    end.

has_gc({flags, Flags}) -> lists:member(garbage_collection, Flags);
has_gc(_) -> false.

%% @doc For a span of the calling process, its session `Own': calls
%% `Set(Gc)' with `Gc' true when the span may trace the process for GC
%% (automatic mode's GC is off, and no other session traces it), and
%% returns what it returns. With no table (the application not running)
%% only other sessions are asked: automatic mode's first poll comes after
%% its table.
-spec span(Own :: term(), Set :: fun((boolean()) -> Result)) -> Result.
span(Own, Set) ->
    Self = self(),
    %% The table may go with its owner at any time (and automatic mode's
    %% GC with its session): no table, no automatic mode's GC.
    Marked = try ets:insert(?TABLE, {Self}) catch error:badarg -> false end,
    try
        AutoGc = Marked andalso (try ets:member(?TABLE, auto_gc) catch error:badarg -> false end),
        Set(not AutoGc andalso not other_gc(Self, Own))
    after
        Marked andalso (try ets:delete(?TABLE, Self) catch error:badarg -> true end)
    end.
