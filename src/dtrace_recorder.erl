%%% @doc A flight recorder for the rare spike: an LTTng session in snapshot
%%% mode keeps the node's last probe events in per-CPU ring buffers in
%%% memory, and writes them to disk only when told: by a trigger, when a
%%% `dtrace:pn/N' call (or another event) matches a filter, from inside the
%%% traced process with no Erlang code on the path; by {@link trigger/2};
%%% or by {@link trigger_cluster/1}, on every connected node at once.
%%% {@link report/1} reads the snapshots of one or more nodes back, merged
%%% by time.
%%%
%%% ```
%%% 1> {ok, R} = dtrace_recorder:start(#{triggers => [{pn, 900, <<"i2 > 20000">>}]}).
%%% {ok,dtrace_recorder}
%%% 2> dtrace:pn(900, 1, 31000).              % a request that took 31 ms
%%% true
%%% 3> [#{path := P}] = dtrace_recorder:snapshots(R).
%%% 4> io:put_chars(dtrace_recorder:report([P])).
%%% '''
%%%
%%% == One recorder per node ==
%%% Each recorder is a process of the `dtrace' application, supervised
%%% (see {@link dtrace_recorder_sup}), with an LTTng session of its own
%%% named after the node (see {@link dtrace_recorder_opts}). The session's
%%% event rules and triggers are filtered on `$ctx.vpid == OSPID', so
%%% several nodes on one host each record, and trigger on, their own
%%% events only, in per-user buffers shared by none of them.
%%%
%%% == Bounds ==
%%% Memory: `SubBuffers * Bytes' per CPU (default 4 x 256 KiB = 1 MiB per
%%% CPU, in the session daemon's shared memory, per Unix user recording).
%%% Disk: at most `max_snapshots' snapshots (default 10), each at most the
%%% buffers' size plus a few KiB of metadata; the oldest are deleted. At
%%% most one snapshot per `min_interval_ms' (default 60000), whatever asks
%%% for it: a trigger fires once (LTTng rate policy `once-after:1'), then
%%% is re-armed when the interval is over; after a snapshot asked for, the
%%% triggers are removed until it is over; a snapshot that still comes
%%% within it (two triggers firing at once) is deleted and counted as
%%% `suppressed'; {@link trigger/3} gets `{error, {rate_limited, Ms}}'.
%%% While triggers are armed, a snapshot asked for waits 300 ms and looks
%%% at the disk first: when the slow request that fired a trigger also
%%% calls {@link trigger_cluster/1}, its node keeps the trigger's snapshot
%%% and takes no second one. The recorder itself costs a directory listing
%%% every 250 ms while triggers are armed, and one `lttng' call (about 3 ms)
%%% every `check_ms'.
%%%
%%% == Failing safely ==
%%% Every `lttng' call runs in a process of its own with a timeout
%%% (`timeout_ms', default 15000; see {@link dtrace_recorder_cli}), never
%%% in the caller's process nor the recorder's: the recorder answers
%%% {@link snapshots/1} and {@link status/1} at once whatever lttng does.
%%% Without lttng, without a session daemon, with an unwritable directory,
%%% {@link start/1} says so and what to do. When the session daemon goes
%%% away, hangs or loses the session later on, the recorder notices within
%%% `check_ms' (default 10000), reports it in {@link status/1}, and sets
%%% its session up again as soon as it can. The probes are never touched:
%%% they keep their cost whatever happens to the recorder.
%%% @end
-module(dtrace_recorder).
-behaviour(gen_server).

-export([start/0, start/1, stop/1, trigger/2, trigger/3, trigger/4, trigger_cluster/1,
         snapshots/1, report/1, report/2, status/1]).
-export([start_link/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-export_type([recorder/0, snapshot/0, opts/0]).

-type recorder() :: atom() | pid().
%% A recorder: its registered name (`name' option, default
%% `dtrace_recorder'), which stays valid across restarts, or its pid.
-type snapshot() :: #{path := binary(), time := integer(), reason := binary(),
                      source := trigger | manual | cluster, node := node(),
                      bytes := non_neg_integer()}.
%% `time': milliseconds since the epoch when the recorder took the
%% snapshot (or, for a trigger's, saw it complete on disk, at most about
%% half a second later).
-type opts() :: #{events => default | detail | [binary() | string()],
                  buffer => {pos_integer(), pos_integer()},
                  triggers => [{pn, 0..950, iodata()} | {event, binary(), iodata()}],
                  max_snapshots => pos_integer(),
                  min_interval_ms => non_neg_integer(),
                  dir => file:filename(),
                  name => atom(),
                  timeout_ms => pos_integer(),
                  check_ms => pos_integer(),
                  lttng => file:filename()}.

%% report/1,2 pass their arguments on to dtrace_recorder_report, whose
%% errors are the contract; their specs say {error, term()}.
-dialyzer({no_underspecs, [report/1, report/2]}).

-define(SCOPE, dtrace_recorder_pg).
-define(GROUP, dtrace_recorders).
-define(POLL_MS, 250).
-define(READY_MS, 5000).
-define(REASON_MAX, 1000).
-define(TRIGGER_GRACE_MS, 300).

-record(st, {conf :: dtrace_recorder_opts:conf(),
             session :: string(),
             dir :: string(),
             ctx :: dtrace_recorder_lttng:ctx(),
             phase = setup :: setup | running | degraded,
             error = none :: term(),
             job = none :: none | {pid(), reference(), term(), reference()},
             queue = queue:new() :: queue:queue(term()),
             waiters = [] :: [gen_server:from()],
             snaps = [] :: [snapshot()],
             seen = #{} :: #{string() => {non_neg_integer(), non_neg_integer()}},
             ignored = [] :: [string()],
             last_snap = undefined :: undefined | integer(),
             triggers = [] :: [map()],
             rearm = undefined :: undefined | reference(),
             poll = undefined :: undefined | reference(),
             armed = true :: boolean(),
             stamp = "0" :: string(),
             suppressed = 0 :: non_neg_integer(),
             polls = 0 :: non_neg_integer(),
             failed = 0 :: non_neg_integer()}).

%%% API

%% @doc Starts a recorder with the default options: `start(#{})'.
-spec start() -> {ok, atom()} | {error, term()}.
start() ->
    start(#{}).

%% @doc Starts a recorder on this node (and the `dtrace' application, if
%% it is not running), and returns once its session records.
%%
%% `Opts' is a map; every key is optional:
%% <ul>
%% <li>`events': `default', `detail', or LTTng event-name patterns
%%   (binaries or strings; `*' matches anything). `default' is what a
%%   recorder that stays on can afford: the user probes (`p/N', `pn/N')
%%   and `span_slow', the spans at least the node's slow-span threshold
%%   long ({@link dtrace:slow_span_threshold/1}, 1 ms by default); shorter
%%   spans write nothing and cost two clock reads.
%%   `detail' (`[<<"org_erlang_dtrace:*">>]') adds every span's begin and
%%   end, the file probes of `dtrace_file', and the span_vm_* events that
%%   let {@link report/1} say why each request was slow, at several times
%%   the cost: for a recorder started while an incident is on
%%   (BENCHMARKS.md, "The flight recorder always on";
%%   {@link dtrace_recorder_opts:event_set/1}). The VM's events
%%   (`<<"org_erlang_dyntrace:message_send">>', ...) are allowed; while
%%   they are recorded, the `dtrace' application sets the trace flags that
%%   feed them (about 1 us per message for `message_send'; see
%%   docs/lttng.md). A pattern that names no event of the two providers is
%%   refused.</li>
%% <li>`buffer': `{SubBuffers, BytesPerSubBuffer}' per CPU, both powers of
%%   two (2..1024 sub-buffers of 4 KiB..64 MiB, at most 1 GiB per CPU).
%%   Default `{4, 262144}': 1 MiB per CPU, about 10,000 user-probe events
%%   per CPU.</li>
%% <li>`triggers': `[{pn, Label, Filter}]' takes a snapshot when
%%   `dtrace:pn(Label, ...)' fires and `Filter' (an LTTng filter
%%   expression over that event's fields, `label', `proc', `user_tag',
%%   `i1'..`i4', `s1'..`s4'; `<<>>' for none) holds, e.g. `{pn, 900,
%%   <<"i2 > 20000">>}'; `{event, <<"provider:event">>, Filter}' the same
%%   on any event of the catalogue (e.g. `org_erlang_dtrace:span_slow'
%%   with `<<"duration_ns > 20000000">>'; a trigger on an event makes the
%%   probe fire: one on `span_end' costs a full span per request, one on
%%   `span_slow' does not). Label 949 is the recorder's
%%   own. At most 16. Default `[]'.</li>
%% <li>`max_snapshots': snapshots kept on disk, the oldest deleted beyond
%%   (1..1000, default 10).</li>
%% <li>`min_interval_ms': at most one snapshot per interval (default
%%   60000).</li>
%% <li>`dir': the directory under which the recorder's own directory
%%   (named like its session) goes; default
%%   `filename:basedir(user_cache, "dtrace_recorder")'.</li>
%% <li>`name': the recorder's registered name (default
%%   `dtrace_recorder'); several recorders need several names.</li>
%% <li>`timeout_ms': the timeout of each `lttng' call (default 15000);
%%   `check_ms': how often the session's health is checked (default
%%   10000, one `lttng' call); `lttng': the `lttng' executable (default:
%%   from `PATH').</li>
%% </ul>
%% Returns `{ok, Recorder}' (its name), or `{error, Reason}':
%% `{badopt, Key, Value}' (an unknown key, a bad value; nothing is
%% created), `{already_started, Name}', `{lttng_missing, Hint}',
%% `{no_session_daemon, Hint}', `{lttng_sink, Why}' (this node does not
%% load liblttng-ust), `{dir, Dir, Posix}', `{lttng_timeout, Command}',
%% `{bad_filter, Command, Output}', `{lttng_failed, Command, Output}',
%% `{not_recording, Hint}'. After an error nothing of the recorder's is
%% left in `lttng list' or `lttng list-triggers'.
-spec start(Opts :: opts()) -> {ok, atom()} | {error, term()}.
start(Opts) ->
    case dtrace_recorder_opts:validate(Opts) of
        {ok, #{name := Name, timeout_ms := Timeout} = Conf} ->
            case application:ensure_all_started(dtrace) of
                {ok, _} ->
                    case dtrace_recorder_sup:start_recorder(Conf) of
                        {ok, Pid} ->
                            Wait = 4 * Timeout + ?READY_MS + 5000,
                            case catch gen_server:call(Pid, await_ready, Wait) of
                                ok ->
                                    {ok, Name};
                                Other ->
                                    _ = dtrace_recorder_sup:stop_recorder(Name),
                                    case Other of
                                        {error, _} = Error -> Error;
                                        {'EXIT', Why} -> {error, {start_failed, Why}}
                                    end
                            end;
                        {error, _} = Error ->
                            Error
                    end;
                {error, Why} ->
                    {error, {not_started, dtrace, Why}}
            end;
        Error ->
            Error
    end.

%% @doc Stops recorder `Recorder': its LTTng session and triggers are
%% destroyed (gone from `lttng list' and `lttng list-triggers'); its
%% snapshots stay on disk. Returns `ok', or `{error, not_found}'.
-spec stop(Recorder :: recorder()) -> ok | {error, not_found}.
stop(Recorder) ->
    case name(Recorder) of
        {ok, Name} -> dtrace_recorder_sup:stop_recorder(Name);
        error -> {error, not_found}
    end.

%% @doc Asks recorder `Recorder' for a snapshot now, and returns at once:
%% `ok', or `{error, {no_recorder, Recorder}}'. `Reason' (iodata, or any
%% term, printed) is recorded in the snapshot as an event: a
%% `dtrace:pn(949, Id, "dtrace_recorder", Reason, Node)' fired by the
%% caller, so that it carries the caller's pid and user tag; the report
%% shows it as the triggering event. Within `min_interval_ms' of the last
%% snapshot, no snapshot is taken (see {@link trigger/3} to know).
-spec trigger(Recorder :: recorder(), Reason :: term()) -> ok | {error, {no_recorder, recorder()}}.
trigger(Recorder, Reason) ->
    case where(Recorder) of
        undefined ->
            {error, {no_recorder, Recorder}};
        Pid ->
            gen_server:cast(Pid, {trigger, mark(manual, Reason)}),
            ok
    end.

%% @doc As {@link trigger/2}, and waits at most `Timeout' milliseconds for
%% the snapshot to be on disk: `{ok, Snapshot}', or `{error, Reason}':
%% `{rate_limited, MsLeft}', `{not_recording, LastError}' (the recorder's
%% session is not set up, see {@link status/1}), an lttng error (see
%% {@link start/1}; a full disk gives `{lttng_failed, _, Output}'),
%% `timeout', `{no_recorder, Recorder}'.
-spec trigger(Recorder :: recorder(), Reason :: term(), Timeout :: timeout()) ->
          {ok, snapshot()} | {error, term()}.
trigger(Recorder, Reason, Timeout) ->
    trigger(Recorder, Reason, Timeout, #{}).

%% @doc As {@link trigger/3}; with `#{force => true}' in `Opts' the snapshot
%% is taken even within `min_interval_ms' of the last one (an operator who
%% asks now, after an automatic snapshot, gets one: no `rate_limited').
%% It still counts as the last snapshot for the triggers' interval, and
%% `max_snapshots' still applies.
-spec trigger(Recorder :: recorder(), Reason :: term(), Timeout :: timeout(), Opts :: #{force => boolean()}) ->
          {ok, snapshot()} | {error, term()}.
trigger(Recorder, Reason, Timeout, Opts) when is_map(Opts) ->
    Info = case maps:get(force, Opts, false) of
               true -> (mark(manual, Reason))#{force => true};
               false -> mark(manual, Reason)
           end,
    case where(Recorder) of
        undefined ->
            {error, {no_recorder, Recorder}};
        Pid ->
            try gen_server:call(Pid, {trigger, Info}, Timeout)
            catch
                exit:{timeout, _} -> {error, timeout};
                exit:{noproc, _} -> {error, {no_recorder, Recorder}}
            end
    end.

%% @doc Every recorder of every connected node takes a snapshot (within
%% its own `min_interval_ms'): the request goes to the members of the
%% `pg' group of the recorders (scope `dtrace_recorder_pg'), over Erlang
%% distribution. Returns `ok' at once (`{error, {not_started, dtrace}}'
%% when the application does not run here). `Reason' is recorded on each
%% node as on {@link trigger/2}, with this node's name as the origin and
%% the caller's user tag. {@link snapshots/1} on each node lists the
%% result.
-spec trigger_cluster(Reason :: term()) -> ok | {error, {not_started, dtrace}}.
trigger_cluster(Reason) ->
    try pg:get_members(?SCOPE, ?GROUP) of
        Pids ->
            Info = mark(cluster, Reason),
            _ = [gen_server:cast(P, {trigger, Info}) || P <- Pids],
            ok
    catch
        error:_ -> {error, {not_started, dtrace}}
    end.

%% @doc The snapshots of recorder `Recorder' on disk, oldest first (also
%% those of an earlier incarnation of the same recorder, found at start).
%% `[]' when there is no such recorder. Answered at once.
-spec snapshots(Recorder :: recorder()) -> [snapshot()].
snapshots(Recorder) ->
    try gen_server:call(Recorder, snapshots, 5000)
    catch exit:_ -> []
    end.

%% @doc The state of recorder `Recorder': `phase' (`setup', `running',
%% `degraded'), `error' (the last one, or `none'), `session', `dir',
%% `triggers' (LTTng names), `snapshots' (count), `suppressed' (trigger
%% snapshots deleted for coming within `min_interval_ms'), `failed'
%% (snapshots LTTng could not write), `polls' (looks for trigger snapshots
%% on disk so far, every 250 ms while triggers are armed). `{error,
%% not_found}' when there is no such recorder.
-spec status(Recorder :: recorder()) -> map() | {error, not_found}.
status(Recorder) ->
    try gen_server:call(Recorder, status, 5000)
    catch exit:_ -> {error, not_found}
    end.

%% @doc The report of snapshots `Paths' (paths, or snapshot maps from
%% {@link snapshots/1}, of any nodes): `report(Paths, #{})'. See {@link
%% dtrace_recorder_report:report/2}.
-spec report(Paths :: [file:filename_all() | snapshot()] | file:filename_all()) -> binary() | {error, term()}.
report(Paths) ->
    dtrace_recorder_report:report(Paths, #{}).

%% @doc The report of snapshots `Paths' with options `Opts'; see {@link
%% dtrace_recorder_report:report/2}.
-spec report(Paths :: [file:filename_all() | snapshot()] | file:filename_all(),
             Opts :: dtrace_recorder_report:opts()) -> binary() | {error, term()}.
report(Paths, Opts) ->
    dtrace_recorder_report:report(Paths, Opts).

%% @private
-spec start_link(dtrace_recorder_opts:conf()) -> {ok, pid()} | ignore | {error, term()}.
start_link(#{name := Name} = Conf) ->
    gen_server:start_link({local, Name}, ?MODULE, Conf, []).

%%% Helpers of the API

name(Name) when is_atom(Name) ->
    {ok, Name};
name(Pid) when is_pid(Pid) ->
    case process_info(Pid, registered_name) of
        {registered_name, Name} -> {ok, Name};
        _ -> error
    end.

where(Name) when is_atom(Name) -> whereis(Name);
where(Pid) when is_pid(Pid) ->
    case is_process_alive(Pid) of
        true -> Pid;
        false -> undefined
    end.

%% The marker event, fired in the caller (it carries the caller's pid and
%% tag), and what the recorders need to know about it.
mark(Source, Reason) ->
    R = reason(Reason),
    Id = erlang:unique_integer([positive]),
    _ = dtrace:pn(dtrace_recorder_opts:mark_label(), Id, <<"dtrace_recorder">>, R, atom_to_binary(node())),
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

%%% gen_server

%% @private
-spec init(Conf :: dtrace_recorder_opts:conf()) -> {ok, #st{}}.
init(#{name := Name, dir := Base, lttng := Lttng, timeout_ms := Timeout} = Conf) ->
    process_flag(trap_exit, true),
    Session = dtrace_recorder_opts:session_name(Name),
    ok = pg:join(?SCOPE, ?GROUP, self()),
    St = #st{conf = Conf, session = Session, dir = filename:join(Base, dtrace_recorder_opts:dir_name(Name)),
             ctx = #{lttng => Lttng, timeout => Timeout}},
    _ = erlang:send_after(maps:get(check_ms, Conf), self(), check),
    {ok, enqueue(setup, St)}.

%% @private
-spec handle_call(Request :: await_ready | snapshots | status | {trigger, map()},
                  From :: gen_server:from(), St :: #st{}) ->
          {reply, term(), #st{}} | {noreply, #st{}}.
handle_call(await_ready, From, #st{phase = setup} = St) ->
    {noreply, St#st{waiters = [From | St#st.waiters]}};
handle_call(await_ready, _From, #st{phase = running} = St) ->
    {reply, ok, St};
handle_call(await_ready, _From, #st{error = Error} = St) ->
    {reply, {error, Error}, St};
handle_call(snapshots, _From, St) ->
    {reply, St#st.snaps, St};
handle_call(status, _From, St) ->
    {reply, status_map(St), St};
handle_call({trigger, Info}, From, St) ->
    {noreply, request_snapshot(Info, From, St)}.

%% @private
-spec handle_cast(Msg :: {trigger, map()}, St :: #st{}) -> {noreply, #st{}}.
handle_cast({trigger, Info}, St) ->
    {noreply, request_snapshot(Info, none, St)}.

%% @private
-spec handle_info(Msg :: term(), St :: #st{}) -> {noreply, #st{}}.
handle_info({job_done, Pid, Result}, #st{job = {Pid, Ref, Op, TRef}} = St) ->
    erlang:demonitor(Ref, [flush]),
    _ = erlang:cancel_timer(TRef),
    {noreply, maybe_run(job_done(Op, Result, St#st{job = none}))};
handle_info({'DOWN', Ref, process, Pid, Reason}, #st{job = {Pid, Ref, Op, TRef}} = St) ->
    _ = erlang:cancel_timer(TRef),
    Result = case Reason of
                 killed -> {error, job_timeout};
                 Other -> {error, {job_crashed, Other}}
             end,
    {noreply, maybe_run(job_done(Op, Result, St#st{job = none}))};
handle_info({timeout, TRef, job_deadline}, #st{job = {Pid, _, _, TRef}} = St) ->
    exit(Pid, kill),
    {noreply, St};
handle_info({poll, Ref}, #st{poll = Ref, phase = running, job = none} = St) ->
    {noreply, enqueue(poll, St#st{poll = undefined})};
handle_info({poll, Ref}, #st{poll = Ref, phase = running} = St) ->
    %% Busy: poll again soon.
    {noreply, schedule_poll(St)};
handle_info(check, #st{conf = #{check_ms := Ms}} = St) ->
    _ = erlang:send_after(Ms, self(), check),
    Op = case St#st.phase of
             running -> check;
             degraded -> setup;
             setup -> none
         end,
    case Op =:= none orelse queued(Op, St) of
        true -> {noreply, St};
        false -> {noreply, enqueue(Op, St)}
    end;
handle_info({snapshot_request, Info, From}, #st{phase = running} = St) ->
    St1 = case queued(poll, St) of
              true -> St;
              false -> St#st{queue = queue:in(poll, St#st.queue)}
          end,
    {noreply, enqueue({snapshot_request, Info, From}, St1)};
handle_info({snapshot_request, _Info, From}, #st{error = Error} = St) ->
    reply(From, {error, {not_recording, Error}}),
    {noreply, St};
handle_info({rearm, Ref}, #st{rearm = Ref} = St) ->
    {noreply, enqueue(rearm, St#st{rearm = undefined})};
handle_info(_Msg, St) ->
    {noreply, St}.

%% @private
%% Crash or stop: the session and triggers go. When lttng does not
%% answer, what is left is removed by name by the next incarnation.
-spec terminate(Reason :: term(), St :: #st{}) -> ok.
terminate(_Reason, #st{job = Job, ctx = Ctx, session = Session} = St) ->
    case Job of
        {Pid, _, _, _} -> exit(Pid, kill);
        none -> ok
    end,
    _ = cleanup(Ctx, Session),
    %% Snapshots stay; an empty directory goes.
    _ = file:del_dir(St#st.dir),
    ok.

%%% Snapshots asked for

%% With triggers armed, the disk is looked at first, ?TRIGGER_GRACE_MS
%% later: a request that comes from the slow work a trigger just fired on
%% (trigger_cluster/1 called by the slow request itself) then finds the
%% trigger's snapshot being written (LTTng starts it within a millisecond
%% here, 70 ms the first time, later under load), and is within the
%% interval of it.
request_snapshot(Info, From, #st{phase = running, triggers = [_ | _]} = St) ->
    _ = erlang:send_after(?TRIGGER_GRACE_MS, self(), {snapshot_request, Info, From}),
    St;
request_snapshot(Info, From, #st{phase = running} = St) ->
    enqueue({snapshot_request, Info, From}, St);
request_snapshot(_Info, From, #st{error = Error} = St) ->
    reply(From, {error, {not_recording, Error}}),
    St.

%% The request's turn: at most one snapshot per min_interval_ms, counting
%% a trigger's snapshot still being written.
decide({snapshot_request, #{force := true} = Info, From}, St) ->
    {{snapshot, Info, From, St#st.last_snap}, St#st{last_snap = erlang:monotonic_time(millisecond)}};
decide({snapshot_request, Info, From}, #st{conf = #{min_interval_ms := Min}, seen = Seen} = St) ->
    Now = erlang:monotonic_time(millisecond),
    case St#st.last_snap of
        Last when is_integer(Last), Now - Last < Min ->
            reply(From, {error, {rate_limited, Last + Min - Now}}),
            skip;
        _ when Min > 0, map_size(Seen) > 0 ->
            reply(From, {error, {rate_limited, Min}}),
            skip;
        Prev ->
            {{snapshot, Info, From, Prev}, St#st{last_snap = Now}}
    end;
decide(Op, St) ->
    {Op, St}.

reply(none, _) -> ok;
reply(From, Msg) -> gen_server:reply(From, Msg).

%%% Jobs: one at a time, each in a process of its own

enqueue(Op, #st{queue = Q} = St) ->
    maybe_run(St#st{queue = queue:in(Op, Q)}).

queued(Op, #st{queue = Q, job = Job}) ->
    lists:member(Op, queue:to_list(Q)) orelse (is_tuple(Job) andalso element(3, Job) =:= Op).

maybe_run(#st{job = none, queue = Q} = St0) ->
    case queue:out(Q) of
        {{value, Op0}, Q1} ->
            case decide(Op0, St0#st{queue = Q1}) of
                skip -> maybe_run(St0#st{queue = Q1});
                {Op, St} -> run(Op, St)
            end;
        {empty, _} ->
            St0
    end;
maybe_run(St) ->
    St.

run(Op, St) ->
    Fun = job(Op, St),
    %% Linked: a recorder killed takes its job along (and the job's lttng
    %% call, see dtrace_recorder_cli).
    Self = self(),
    {Pid, Ref} = spawn_opt(fun() -> Self ! {job_done, self(), Fun()} end, [link, monitor]),
    TRef = erlang:start_timer(deadline(Op, St), self(), job_deadline),
    St#st{job = {Pid, Ref, Op, TRef}}.

%% A safety net only: each lttng call has its own timeout.
deadline(setup, #st{ctx = #{timeout := T}, triggers = Ts}) -> (12 + 2 * length(Ts)) * T + ?READY_MS;
deadline(_, #st{ctx = #{timeout := T}}) -> 8 * T + 5000.

job(setup, #st{conf = Conf, ctx = Ctx, session = Session, dir = Dir}) ->
    fun() -> setup(Conf, Ctx, Session, Dir) end;
job({snapshot, Info, _From, _Prev}, #st{ctx = Ctx, session = Session, dir = Dir, stamp = Stamp} = St) ->
    Meta = meta(Info, St),
    fun() -> take_snapshot(Ctx, Session, {Dir, Stamp}, Info, Meta) end;
job(poll, #st{dir = Dir}) ->
    fun() -> [{N, dtrace_recorder_store:dir_info(P)} || #{name := N, kind := trigger, path := P}
                                                            <- dtrace_recorder_store:scan(Dir)] end;
job({adopt, Name, Meta}, #st{dir = Dir}) ->
    Path = filename:join(Dir, Name),
    fun() ->
            case dtrace_recorder_store:write_sidecar(Path, Meta) of
                ok -> {ok, snapshot(Path, Meta)};
                {error, Why} -> _ = dtrace_recorder_store:delete(Path), {error, {sidecar, Why}}
            end
    end;
job({delete, Paths}, _St) ->
    fun() -> [dtrace_recorder_store:delete(P) || P <- Paths] end;
job(check, #st{ctx = Ctx, session = Session, triggers = Triggers}) ->
    fun() -> check(Ctx, Session, Triggers) end;
job(rearm, #st{ctx = Ctx, session = Session, triggers = Triggers, armed = Armed}) ->
    fun() -> rearm(Ctx, Session, Triggers, Armed) end;
job(disarm, #st{ctx = Ctx, triggers = Triggers}) ->
    fun() -> remove_all(Ctx, [N || #{name := N} <- Triggers]) end.

job_done(setup, {ok, #{triggers := Triggers, found := Found, stamp := Stamp}}, St) ->
    [gen_server:reply(W, ok) || W <- St#st.waiters],
    St1 = St#st{phase = running, error = none, waiters = [], triggers = Triggers, seen = #{}, armed = true,
                stamp = Stamp},
    Known = [P || #{path := P} <- St#st.snaps],
    keep([S || #{path := P} = S <- Found, not lists:member(P, Known)], schedule_poll(St1));
job_done(setup, {error, Why}, St) ->
    %% The recorder's directory, if it made it and nothing is in it.
    _ = St#st.snaps =:= [] andalso file:del_dir(St#st.dir),
    [gen_server:reply(W, {error, Why}) || W <- St#st.waiters],
    St#st.waiters =:= [] andalso
        logger:warning("dtrace_recorder ~p: not recording: ~p; trying again in ~b ms",
                       [maps:get(name, St#st.conf), Why, maps:get(check_ms, St#st.conf)]),
    St#st{phase = degraded, error = Why, waiters = []};
job_done({snapshot, _Info, From, _Prev}, {ok, Snap}, #st{triggers = Ts, conf = #{min_interval_ms := Min}} = St) ->
    reply(From, {ok, Snap}),
    %% The triggers rest until the interval is over: one firing now would
    %% write a snapshot only to have it deleted.
    St1 = case Ts =/= [] andalso Min > 0 andalso St#st.armed of
              true -> schedule_rearm(erlang:monotonic_time(millisecond) + Min, enqueue(disarm, St));
              false -> St
          end,
    keep([Snap], St1);
job_done({snapshot, _Info, From, Prev}, {error, Why}, St) ->
    reply(From, {error, Why}),
    logger:warning("dtrace_recorder ~p: snapshot failed: ~p", [maps:get(name, St#st.conf), Why]),
    lost_daemon(Why, St#st{last_snap = Prev, failed = St#st.failed + 1});
job_done(poll, Found, St) when is_list(Found) ->
    polled(Found, schedule_poll(St#st{polls = St#st.polls + 1}));
job_done({adopt, _, _}, {ok, Snap}, St) ->
    keep([Snap], St);
job_done({adopt, Name, _}, {error, Why}, St) ->
    logger:warning("dtrace_recorder ~p: trigger snapshot ~ts not kept: ~p",
                   [maps:get(name, St#st.conf), Name, Why]),
    St#st{failed = St#st.failed + 1};
job_done(check, {ok, Check}, St) ->
    checked(Check, St);
job_done(rearm, {ok, Triggers}, St) ->
    St#st{triggers = Triggers, armed = true};
job_done(disarm, ok, St) ->
    St#st{armed = false};
job_done(disarm, {error, _} = Error, St) ->
    %% Those still there fire once at most, as before.
    job_done(rearm, Error, St);
job_done(Op, {error, Why}, St) when Op =:= check; Op =:= rearm ->
    logger:warning("dtrace_recorder ~p: ~p failed: ~p", [maps:get(name, St#st.conf), Op, Why]),
    St#st{phase = degraded, error = Why};
job_done(_Op, _Result, St) ->
    St.

%% The session is gone with its daemon: set up again at the next check.
lost_daemon({no_session_daemon, _} = Why, St) -> St#st{phase = degraded, error = Why};
lost_daemon({lttng_timeout, _} = Why, St) -> St#st{phase = degraded, error = Why};
lost_daemon(_Why, St) -> St.

%% New snapshots on disk: kept, newest last, the oldest beyond
%% max_snapshots deleted.
keep(New, #st{snaps = Snaps, conf = #{max_snapshots := Max}} = St) ->
    All = lists:sort(fun(#{time := A}, #{time := B}) -> A =< B end, Snaps ++ New),
    Drop = max(0, length(All) - Max),
    {Old, Kept} = lists:split(Drop, All),
    St1 = St#st{snaps = Kept,
                ignored = [filename:basename(binary_to_list(P)) || #{path := P} <- Old] ++ St#st.ignored},
    case Old of
        [] -> St1;
        _ -> enqueue({delete, [binary_to_list(P) || #{path := P} <- Old]}, St1)
    end.

%% A trigger's snapshot is taken when it is complete: LTTng's metadata is
%% there and the size did not change between two polls.
polled(Found, #st{snaps = Snaps, seen = Seen, ignored = Ignored0} = St) ->
    %% Names handled already (kept, being deleted): forgotten once gone.
    Ignored = [N || N <- Ignored0, lists:keymember(N, 1, Found)],
    Known = [filename:basename(binary_to_list(P)) || #{path := P} <- Snaps] ++ Ignored,
    New = [{N, Info} || {N, Info} <- Found, not lists:member(N, Known)],
    lists:foldl(fun({Name, {Size, Meta}}, Acc) ->
                        case maps:find(Name, Acc#st.seen) of
                            {ok, {Size, _}} when Meta, Size > 0 -> complete(Name, Acc);
                            _ -> Acc#st{seen = (Acc#st.seen)#{Name => {Size, 0}}}
                        end
                end, St#st{seen = maps:with([N || {N, _} <- New], Seen), ignored = Ignored}, New).

%% One chain of poll timers, while triggers can write snapshots.
schedule_poll(#st{poll = Old, phase = running, triggers = [_ | _]} = St) ->
    _ = is_reference(Old) andalso erlang:cancel_timer(Old),
    Ref = make_ref(),
    _ = erlang:send_after(?POLL_MS, self(), {poll, Ref}),
    St#st{poll = Ref};
schedule_poll(St) ->
    St#st{poll = undefined}.

complete(Name, #st{conf = #{min_interval_ms := Min}, last_snap = Last, dir = Dir} = St) ->
    Now = erlang:monotonic_time(millisecond),
    St1 = St#st{seen = maps:remove(Name, St#st.seen), ignored = [Name | St#st.ignored]},
    %% The trigger that fired is spent (once-after:1): every trigger is
    %% re-armed when the interval is over.
    St2 = schedule_rearm(Now + Min, St1),
    case Last of
        L when is_integer(L), Now - L < Min ->
            enqueue({delete, [filename:join(Dir, Name)]}, St2#st{suppressed = St2#st.suppressed + 1});
        _ ->
            Info = #{source => trigger, reason => trigger_reason(St), origin => node(), tag => undefined},
            enqueue({adopt, Name, meta(Info, St)}, St2#st{last_snap = Now})
    end.

schedule_rearm(At, #st{rearm = Old} = St) ->
    _ = is_reference(Old) andalso erlang:cancel_timer(Old),
    Ref = make_ref(),
    _ = erlang:send_after(max(0, At - erlang:monotonic_time(millisecond)), self(), {rearm, Ref}),
    St#st{rearm = Ref}.

checked(#{session := active, triggers := Triggers}, #st{triggers = Ours} = St) ->
    %% A trigger whose snapshot failed (LTTng counts it) is spent, with no
    %% snapshot on disk to tell: re-arm it after the interval.
    Failed = [N || #{name := N, failures := F0} <- Ours,
                   {_, F} <- [lists:keyfind(list_to_binary(N), 1, Triggers)], F > F0],
    %% (Disarmed on purpose after a snapshot asked for: none is missing.)
    Missing = [N || St#st.armed, #{name := N} <- Ours, not lists:keymember(list_to_binary(N), 1, Triggers)],
    case {Failed, Missing} of
        {[], []} ->
            St;
        {_, [_ | _]} ->
            enqueue(setup, St#st{phase = degraded, error = {triggers_lost, Missing}});
        {[_ | _], []} ->
            Ours1 = [T#{failures => case lists:keyfind(list_to_binary(N), 1, Triggers) of
                                        {_, F} -> F;
                                        false -> F0
                                    end} || #{name := N, failures := F0} = T <- Ours],
            #st{conf = #{min_interval_ms := Min}} = St,
            Now = erlang:monotonic_time(millisecond),
            schedule_rearm(Now + Min, St#st{triggers = Ours1, failed = St#st.failed + length(Failed)})
    end;
checked(#{session := State}, St) ->
    enqueue(setup, St#st{phase = degraded, error = {session_lost, State}}).

meta(Info, #st{conf = Conf, session = Session, triggers = Triggers}) ->
    #{version => 1,
      node => node(),
      os_pid => list_to_binary(os:getpid()),
      recorder => maps:get(name, Conf),
      session => list_to_binary(Session),
      source => maps:get(source, Info),
      reason => maps:get(reason, Info),
      origin => maps:get(origin, Info),
      tag => case maps:get(tag, Info) of undefined -> null; T -> T end,
      time_ms => os:system_time(millisecond),
      mark_label => dtrace_recorder_opts:mark_label(),
      mark_id => case Info of
                     #{mark_node := N, mark_id := Id} when N =:= node() -> Id;
                     _ -> null
                 end,
      triggers => [#{event => E, filter => F, armed_at_ns => A}
                   || #{event := E, filter := F, armed_at_ns := A} <- Triggers]}.

trigger_reason(#st{conf = #{triggers := Specs}}) ->
    iolist_to_binary(["trigger: ", lists:join(" or ", [describe(S) || S <- Specs])]).

describe({pn, Label, <<>>}) -> io_lib:format("pn(~b)", [Label]);
describe({pn, Label, F}) -> io_lib:format("pn(~b) when ~ts", [Label, F]);
describe({event, E, <<>>}) -> E;
describe({event, E, F}) -> [E, " when ", F].

snapshot(Path, Meta) ->
    #{path => unicode:characters_to_binary(Path),
      time => maps:get(time_ms, Meta),
      reason => maps:get(reason, Meta),
      source => maps:get(source, Meta),
      node => maps:get(node, Meta),
      bytes => element(1, dtrace_recorder_store:dir_info(Path))}.

status_map(#st{} = St) ->
    #{phase => St#st.phase, error => St#st.error, session => list_to_binary(St#st.session),
      dir => unicode:characters_to_binary(St#st.dir),
      triggers => [list_to_binary(N) || #{name := N} <- St#st.triggers],
      snapshots => length(St#st.snaps), suppressed => St#st.suppressed, failed => St#st.failed,
      polls => St#st.polls}.

%%% The jobs' work (in the job's process)

setup(#{buffer := Buffer, events := Events, triggers := Specs, name := Name}, Ctx, Session, Dir) ->
    Steps = [fun() -> sink() end,
             fun() -> sweep(Ctx, Name) end,
             fun() -> case dtrace_recorder_store:check_writable(Dir) of
                          ok -> ok;
                          {error, Posix} -> {error, {dir, unicode:characters_to_binary(Dir), Posix}}
                      end
             end],
    case run_steps(Steps) of
        ok ->
            Pid = os:getpid(),
            Triggers = [trigger_state(Session, I, 1, Spec, Pid)
                        || {I, Spec} <- lists:zip(lists:seq(1, length(Specs)), Specs)],
            Stamp = integer_to_list(erlang:system_time(millisecond)),
            case dtrace_recorder_lttng:create(Ctx, Session, {Dir, "t" ++ Stamp}, Buffer,
                                              rules(Events, Triggers, Pid)) of
                ok ->
                    %% The session records in this node before any trigger
                    %% is armed: a trigger's event notifier enables the same
                    %% tracepoints, so the mark would say "enabled" while
                    %% the session's buffers are not yet there (seen on a
                    %% fresh machine: a trigger's snapshot with no events).
                    case wait_recording() of
                        ok ->
                            case arm(Ctx, Session, Triggers, []) of
                                {ok, Armed} ->
                                    {ok, #{triggers => Armed, found => found(Dir), stamp => Stamp}};
                                {error, Why, _Armed} ->
                                    _ = cleanup(Ctx, Session),
                                    badopt_filter({error, Why}, Specs)
                            end;
                        Error ->
                            _ = cleanup(Ctx, Session),
                            Error
                    end;
                Error ->
                    badopt_filter(Error, Specs)
            end;
        Error ->
            Error
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

%% What an earlier incarnation of this recorder left, and what recorders
%% of dead nodes of this host left, is removed, by name (see
%% dtrace_recorder_opts).
sweep(Ctx, Recorder) ->
    case dtrace_recorder_lttng:sessions(Ctx) of
        {ok, Sessions} ->
            Old = [S || S <- Sessions, dtrace_recorder_opts:leftover(S, Recorder)],
            case destroy_all(Ctx, Old) of
                ok ->
                    case dtrace_recorder_lttng:triggers(Ctx) of
                        {ok, Ts} ->
                            remove_all(Ctx, [N || {N, _} <- Ts, dtrace_recorder_opts:leftover(N, Recorder)]);
                        Error ->
                            Error
                    end;
                Error ->
                    Error
            end;
        Error ->
            Error
    end.

destroy_all(_Ctx, []) -> ok;
destroy_all(Ctx, [S | Rest]) ->
    case dtrace_recorder_lttng:destroy(Ctx, S) of
        ok -> destroy_all(Ctx, Rest);
        Error -> Error
    end.

remove_all(_Ctx, []) -> ok;
remove_all(Ctx, [N | Rest]) ->
    case dtrace_recorder_lttng:remove_trigger(Ctx, N) of
        ok -> remove_all(Ctx, Rest);
        Error -> Error
    end.

trigger_state(Session, I, Gen, Spec, Pid) ->
    {Event, Filter} = case Spec of
                          {pn, Label, F} ->
                              {<<"org_erlang_dtrace:user_trace_n">>,
                               iolist_to_binary(["label == ", integer_to_list(Label), paren(F)])};
                          {event, E, <<>>} ->
                              {E, <<>>};
                          {event, E, F} ->
                              {E, iolist_to_binary(["(", F, ")"])}
                      end,
    Full = case Filter of
               <<>> -> iolist_to_binary(["$ctx.vpid == ", Pid]);
               _ -> iolist_to_binary([Filter, " && $ctx.vpid == ", Pid])
           end,
    #{index => I, gen => Gen, spec => Spec, name => dtrace_recorder_opts:trigger_name(Session, I, Gen),
      event => Event, filter => Filter, lttng_filter => Full, failures => 0, armed_at_ns => 0}.

paren(<<>>) -> [];
paren(F) -> [" && (", F, ")"].

%% The session's event rules: the events asked for, filtered on this OS
%% process; plus, for an event they do not cover, a rule that records
%% the recorder's marker events and the events the triggers fire on.
rules(Events, Triggers, Pid) ->
    Vpid = iolist_to_binary(["$ctx.vpid == ", Pid]),
    Covered = lists:usort(lists:append([dtrace_recorder_lttng:match_events(E) || E <- Events])),
    Mark = {<<"org_erlang_dtrace:user_trace_n">>,
            iolist_to_binary(["label == ", integer_to_list(dtrace_recorder_opts:mark_label())])},
    Extra = [{E, F} || {E, F} <- [Mark | [{E, F} || #{event := E, filter := F} <- Triggers]],
                       not lists:member(E, Covered)],
    ByEvent = maps:groups_from_list(fun({E, _}) -> E end, fun({_, F}) -> F end, Extra),
    [{Events, Vpid}
     | [{[E], iolist_to_binary([Vpid, " && (", lists:join(" || ", [any(F) || F <- Fs]), ")"])}
        || {E, Fs} <- lists:sort(maps:to_list(ByEvent))]].

any(<<>>) -> <<"1">>;
any(F) -> ["(", F, ")"].

%% Adds each trigger; {error, Why, AddedSoFar} at the first failure.
arm(_Ctx, _Session, [], Acc) ->
    {ok, lists:reverse(Acc)};
arm(Ctx, Session, [#{name := Name, event := Event, lttng_filter := F} = T | Rest], Acc) ->
    At = os:system_time(nanosecond),
    case dtrace_recorder_lttng:add_trigger(Ctx, Name, Session, Event, F) of
        ok -> arm(Ctx, Session, Rest, [T#{armed_at_ns => At, failures => 0} | Acc]);
        {error, Why} -> {error, Why, Acc}
    end.

%% Each trigger again, as a new generation, added before the old one is
%% removed (unless disarmed): no moment without it.
rearm(Ctx, Session, Triggers, WereArmed) ->
    Pid = os:getpid(),
    New = [trigger_state(Session, I, G + 1, Spec, Pid) || #{index := I, gen := G, spec := Spec} <- Triggers],
    case arm(Ctx, Session, New, []) of
        {ok, Armed} ->
            _ = WereArmed andalso remove_all(Ctx, [N || #{name := N} <- Triggers]),
            {ok, Armed};
        {error, Why, Armed} ->
            _ = remove_all(Ctx, [N || #{name := N} <- Armed]),
            {error, Why}
    end.

%% The session daemon enables the session's events in this process
%% asynchronously: wait until the marker's event is enabled here.
wait_recording() ->
    wait_recording(erlang:monotonic_time(millisecond) + ?READY_MS).

wait_recording(Deadline) ->
    case dtrace:pn(dtrace_recorder_opts:mark_label(), 0, <<"dtrace_recorder">>, <<"recording">>,
                   atom_to_binary(node())) of
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

%% Snapshots of an earlier incarnation, with their sidecars. One the
%% recorder asked for without a sidecar was never finished: deleted. A
%% trigger's without one is left to the poll, which adopts it.
found(Dir) ->
    lists:append([case {dtrace_recorder_store:read_sidecar(P), K} of
                      {{ok, M}, _} -> [found_snapshot(P, M)];
                      {error, manual} -> _ = dtrace_recorder_store:delete(P), [];
                      {error, trigger} -> []
                  end || #{path := P, kind := K} <- dtrace_recorder_store:scan(Dir)]).

found_snapshot(Path, M) ->
    #{path => unicode:characters_to_binary(Path),
      time => maps:get(<<"time_ms">>, M, 0),
      reason => maps:get(<<"reason">>, M, <<>>),
      source => binary_to_atom(maps:get(<<"source">>, M, <<"trigger">>)),
      node => binary_to_atom(maps:get(<<"node">>, M, atom_to_binary(node()))),
      bytes => element(1, dtrace_recorder_store:dir_info(Path))}.

take_snapshot(Ctx, Session, {Dir, Stamp}, Info, Meta0) ->
    Id = erlang:unique_integer([positive]),
    Meta = case Info of
               #{mark_node := N, mark_id := MarkId} when N =:= node() ->
                   Meta0#{mark_id => MarkId};
               _ ->
                   %% Asked from another node: the marker is fired here, with
                   %% the asker's tag.
                   _ = dtrace:put_tag(maps:get(tag, Info)),
                   _ = dtrace:pn(dtrace_recorder_opts:mark_label(), Id, <<"dtrace_recorder">>,
                                 maps:get(reason, Info), atom_to_binary(maps:get(origin, Info))),
                   Meta0#{mark_id => Id}
           end,
    Prefix = "m" ++ Stamp ++ "n" ++ integer_to_list(Id),
    case dtrace_recorder_lttng:snapshot(Ctx, Session, Prefix) of
        ok ->
            case dtrace_recorder_store:find_manual(Dir, Prefix) of
                {ok, Name} ->
                    Path = filename:join(Dir, Name),
                    case dtrace_recorder_store:write_sidecar(Path, Meta) of
                        ok ->
                            {ok, snapshot(Path, Meta)};
                        {error, Why} ->
                            _ = dtrace_recorder_store:delete(Path),
                            {error, {sidecar, Why}}
                    end;
                error ->
                    {error, {snapshot_not_found, unicode:characters_to_binary(Dir)}}
            end;
        {error, Why} ->
            _ = case dtrace_recorder_store:find_manual(Dir, Prefix) of
                    {ok, Name} -> dtrace_recorder_store:delete(filename:join(Dir, Name));
                    error -> ok
                end,
            {error, Why}
    end.

check(Ctx, Session, Triggers) ->
    case dtrace_recorder_lttng:session_state(Ctx, Session) of
        {ok, State} when State =/= active; Triggers =:= [] ->
            {ok, #{session => State, triggers => []}};
        {ok, active} ->
            case dtrace_recorder_lttng:triggers(Ctx) of
                {ok, Ts} -> {ok, #{session => active, triggers => Ts}};
                Error -> Error
            end;
        Error ->
            Error
    end.

%% Destroys the session and removes its triggers, found by name (a
%% re-arming job killed half-way may have added one the state does not
%% know); stops at the first timeout (lttng hangs: the next incarnation
%% removes the rest by name).
cleanup(Ctx, Session) ->
    case dtrace_recorder_lttng:destroy(Ctx, Session) of
        {error, {lttng_timeout, _}} = Error ->
            Error;
        _ ->
            case dtrace_recorder_lttng:triggers(Ctx) of
                {ok, Ts} ->
                    lists:foldl(fun(_, {error, {lttng_timeout, _}} = Error) -> Error;
                                   (N, _) -> dtrace_recorder_lttng:remove_trigger(Ctx, N)
                                end, ok, [N || {N, _} <- Ts, lists:prefix(Session ++ "-t", binary_to_list(N))]);
                Error ->
                    Error
            end
    end.
