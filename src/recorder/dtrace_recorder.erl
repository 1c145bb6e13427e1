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
%%% named after the node (see {@link dtrace_recorder_session}). The session's
%%% event rules and triggers are filtered on `$ctx.vpid == OSPID', so
%%% several nodes on one host each record, and trigger on, their own
%%% events only, in per-user buffers shared by none of them.
%%%
%%% == Bounds ==
%%% Memory, disk and rate are bounded by the options `buffer',
%%% `max_snapshots' and `min_interval_ms' (their defaults: start/1's doc;
%%% what each holds: docs/recorder.md, "Options, defaults and bounds"). A
%%% snapshot within `min_interval_ms' of the last is deleted and counted as
%%% `suppressed'; {@link trigger/3} gets `{error, {rate_limited, Ms}}'.
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
%%%
%%% == The code ==
%%% This module is the recorder's process: the API, the state, the rate
%%% limit, and the jobs, each in a process of its own, all dispatched by
%%% `job/2'. The rest of `src/recorder/', one way down: ARCHITECTURE.md.
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
                      bytes := non_neg_integer(), relay => sent | relay_down}.
%% `time': milliseconds since the epoch when the recorder took the
%% snapshot (or, for a trigger's, saw it complete on disk, at most about
%% half a second later). `relay' (with the `relay' option only): `sent'
%% (the relay daemon has it; `path' is where `relay_dir' shows it, or,
%% without `relay_dir', its place relative to the relay's output
%% directory, `HOSTNAME/dtrace-rec-NODE-RECORDER/NAME-*', and `bytes' is
%% 0), or `relay_down' (the relay did not take it: it is in the local
%% directory).
-type opts() :: #{events => default | detail | [binary() | string()],
                  buffer => {pos_integer(), pos_integer()},
                  triggers => [{pn, 0..950, iodata()} | {event, binary(), iodata()}],
                  max_snapshots => pos_integer(),
                  min_interval_ms => non_neg_integer(),
                  dir => file:filename(),
                  name => atom(),
                  timeout_ms => pos_integer(),
                  check_ms => pos_integer(),
                  lttng => file:filename(),
                  relay => none | string() | binary(),
                  relay_dir => none | file:filename()}.

%% report/1,2 pass their arguments on to dtrace_recorder_report, whose
%% errors are the contract; their specs say {error, term()}.
-dialyzer({no_underspecs, [report/1, report/2]}).

-define(SCOPE, dtrace_recorder_pg).
-define(GROUP, dtrace_recorders).
-define(POLL_MS, 250).
-define(READY_MS, 5000).
-define(TRIGGER_GRACE_MS, 300).

-record(st, {conf :: dtrace_recorder_opts:conf(),
             ctx :: dtrace_recorder_session:ctx(),
             phase = setup :: setup | running | degraded,
             error = none :: term(),
             job = none :: none | {pid(), reference(), term(), reference(), fun((term(), #st{}) -> #st{})},
             queue = queue:new() :: queue:queue(term()),
             waiters = [] :: [gen_server:from()],
             snaps = [] :: [snapshot()],
             seen = #{} :: #{string() => {non_neg_integer(), non_neg_integer()}},
             ignored = [] :: [string()],
             last_snap = undefined :: undefined | integer(),
             triggers = [] :: [dtrace_recorder_session:trigger()],
             rearm = undefined :: undefined | reference(),
             poll = undefined :: undefined | reference(),
             armed = true :: boolean(),
             stamp = "0" :: string(),
             counts = #{suppressed => 0, polls => 0, failed => 0} :: #{suppressed | polls | failed => non_neg_integer()},
             relay = #{state => unknown, error => none, fallbacks => 0} :: map()}).

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
%% <li>`events': `default' (what a recorder that stays on can afford),
%%   `detail' (for an incident: what lets {@link report/1} say why each
%%   request was slow, at several times the cost), both as {@link
%%   dtrace_recorder_opts:event_set/1} says, or LTTng event-name patterns
%%   (binaries or strings; `*' matches anything). The VM's events
%%   (`<<"org_erlang_dyntrace:message_send">>', ...) are allowed; while
%%   they are recorded, the `dtrace' application sets the trace flags that
%%   feed them (the cost per message: README.md, "What it costs";
%%   docs/tracers.md, "LTTng"). A pattern that names no event of the two providers is
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
%% <li>`relay': a relay daemon (`lttng-relayd') to send the snapshots to
%%   instead of `dir', in LTTng's URL syntax: `"net://HOST"' (ports 5342
%%   and 5343), `"net://HOST:CTRL"', `"net://HOST:CTRL:DATA"', or
%%   `"net6://[ADDR]..."' likewise; no path: the relay writes them under
%%   `HOSTNAME/dtrace-rec-NODE-RECORDER/' of its output directory, so that
%%   every node's snapshots are in one place and the nodes of one host stay
%%   apart. A snapshot the relay does not take (down, not answering, its
%%   disk full) is taken into `dir' instead, and says so (`relay =>
%%   relay_down', in {@link status/1} and the log). Default `none'.</li>
%% <li>`relay_dir': the relay daemon's output directory as this node sees
%%   it (the relay runs on this host, or its output is mounted here); the
%%   recorder then lists, completes (sidecars), adopts and deletes the
%%   relay's copies of its snapshots as it does local ones. Without it
%%   the recorder cannot see them: it lists only the snapshots asked for
%%   (by their place on the relay), and re-arms its triggers every
%%   `min_interval_ms' (at least `check_ms'). Default `none'; only with
%%   `relay'.</li>
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
                            Ready = try gen_server:call(Pid, await_ready, Wait)
                                    catch exit:Why -> {error, {start_failed, Why}}
                                    end,
                            _ = Ready =:= ok orelse dtrace_recorder_sup:stop_recorder(Name),
                            case Ready of
                                ok -> {ok, Name};
                                {error, _} = Error -> Error
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
            gen_server:cast(Pid, {trigger, dtrace_recorder_session:mark(manual, Reason)}),
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
               true -> (dtrace_recorder_session:mark(manual, Reason))#{force => true};
               false -> dtrace_recorder_session:mark(manual, Reason)
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
            Info = dtrace_recorder_session:mark(cluster, Reason),
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
%% on disk so far, every 250 ms while triggers are armed); with the
%% `relay' option, `relay': `#{url, dir, state, error, fallbacks}', where
%% `dir' is the relay's copy of the recorder's directory (`none' without
%% `relay_dir'), `state' `unknown' (before the first look), `up' or
%% `relay_down', `error' why it was last found down (or `none'), and
%% `fallbacks' the snapshots taken into `dir' because of it. `{error,
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

%%% gen_server

%% @private
-spec init(Conf :: dtrace_recorder_opts:conf()) -> {ok, #st{}}.
init(Conf) ->
    process_flag(trap_exit, true),
    ok = pg:join(?SCOPE, ?GROUP, self()),
    St = #st{conf = Conf, ctx = dtrace_recorder_session:context(Conf)},
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
handle_info({job_done, Pid, Result}, #st{job = {Pid, Ref, _Op, TRef, Done}} = St) ->
    erlang:demonitor(Ref, [flush]),
    _ = erlang:cancel_timer(TRef),
    {noreply, maybe_run(Done(Result, St#st{job = none}))};
handle_info({'DOWN', Ref, process, Pid, Reason}, #st{job = {Pid, Ref, _Op, TRef, Done}} = St) ->
    _ = erlang:cancel_timer(TRef),
    Result = case Reason of
                 killed -> {error, job_timeout};
                 Other -> {error, {job_crashed, Other}}
             end,
    {noreply, maybe_run(Done(Result, St#st{job = none}))};
handle_info({timeout, TRef, job_deadline}, #st{job = {Pid, _, _, TRef, _}} = St) ->
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
terminate(_Reason, #st{job = Job, ctx = Ctx}) ->
    case Job of
        {Pid, _, _, _, _} -> exit(Pid, kill);
        none -> ok
    end,
    _ = dtrace_recorder_session:cleanup(Ctx),
    %% Snapshots stay; an empty directory goes.
    _ = file:del_dir(maps:get(dir, Ctx)),
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

reply(none, _) -> ok;
reply(From, Msg) -> gen_server:reply(From, Msg).

%%% Jobs: one at a time, each in a process of its own

enqueue(Op, #st{queue = Q} = St) ->
    maybe_run(St#st{queue = queue:in(Op, Q)}).

queued(Op, #st{queue = Q, job = Job}) ->
    lists:member(Op, queue:to_list(Q)) orelse (is_tuple(Job) andalso element(3, Job) =:= Op).

maybe_run(#st{job = none, queue = Q} = St0) ->
    case queue:out(Q) of
        {{value, Op}, Q1} ->
            St1 = St0#st{queue = Q1},
            case job(Op, St1) of
                skip -> maybe_run(St1);
                {Work, Deadline, Done, St} -> run(Op, Work, Deadline, Done, St)
            end;
        {empty, _} ->
            St0
    end;
maybe_run(St) ->
    St.

run(Op, Work, Deadline, Done, St) ->
    %% Linked: a recorder killed takes its job along (and the job's lttng
    %% call, see dtrace_recorder_cli).
    Self = self(),
    {Pid, Ref} = spawn_opt(fun() -> Self ! {job_done, self(), Work()} end, [link, monitor]),
    TRef = erlang:start_timer(Deadline, self(), job_deadline),
    St#st{job = {Pid, Ref, Op, TRef, Done}}.

%% Every kind of job, in this one place: `{Work, Deadline, Done, St}',
%% the work (dtrace_recorder_session's, on the session's context, run in
%% the job's process), its deadline (a safety net only: each lttng call
%% has its own timeout), and what its result (or `{error, job_timeout |
%% {job_crashed, Why}}') does to the state; `skip' for a snapshot the rate
%% limit refuses (the asker is told): at most one snapshot per
%% min_interval_ms, counting a trigger's snapshot still being written.
job(setup, #st{ctx = Ctx, triggers = Ts} = St) ->
    {fun() -> dtrace_recorder_session:setup(Ctx) end, (12 + 2 * length(Ts)) * timeout(St) + ?READY_MS,
     fun setup_done/2, St};
job({snapshot_request, #{force := true} = Info, From}, St) ->
    snapshot_job(Info, From, St#st.last_snap, St#st{last_snap = erlang:monotonic_time(millisecond)});
job({snapshot_request, Info, From}, #st{conf = #{min_interval_ms := Min}, seen = Seen} = St) ->
    Now = erlang:monotonic_time(millisecond),
    case St#st.last_snap of
        Last when is_integer(Last), Now - Last < Min ->
            reply(From, {error, {rate_limited, Last + Min - Now}}),
            skip;
        _ when Min > 0, map_size(Seen) > 0 ->
            reply(From, {error, {rate_limited, Min}}),
            skip;
        Prev ->
            snapshot_job(Info, From, Prev, St#st{last_snap = Now})
    end;
job(poll, #st{ctx = Ctx} = St) ->
    {fun() -> dtrace_recorder_session:poll(Ctx) end, deadline(St), fun poll_done/2, St};
job({adopt, Name, Meta}, #st{ctx = Ctx} = St) ->
    {fun() -> dtrace_recorder_session:adopt(Ctx, Name, Meta) end, deadline(St),
     fun(Result, S) -> adopt_done(Name, Result, S) end, St};
job({delete, Paths}, #st{ctx = Ctx} = St) ->
    {fun() -> dtrace_recorder_session:delete(Ctx, Paths) end, deadline(St), fun(_, S) -> S end, St};
job(check, #st{ctx = Ctx, triggers = Triggers} = St) ->
    {fun() -> dtrace_recorder_session:check(Ctx, Triggers) end, deadline(St), fun check_done/2, St};
job(rearm, #st{ctx = Ctx, triggers = Triggers, armed = Armed} = St) ->
    {fun() -> dtrace_recorder_session:rearm(Ctx, Triggers, Armed) end, deadline(St), fun rearm_done/2, St};
job(disarm, #st{ctx = Ctx, triggers = Triggers} = St) ->
    {fun() -> dtrace_recorder_session:disarm(Ctx, Triggers) end, deadline(St), fun disarm_done/2, St}.

snapshot_job(Info, From, Prev, #st{ctx = Ctx, stamp = Stamp} = St) ->
    Meta = meta(Info, St),
    {fun() -> dtrace_recorder_session:take_snapshot(Ctx, Stamp, Info, Meta) end, deadline(St),
     fun(Result, S) -> snapshot_done(From, Prev, Result, S) end, St}.

timeout(#st{conf = #{timeout_ms := T}}) -> T.

deadline(St) -> 8 * timeout(St) + 5000.

%%% What the jobs' results do

setup_done({ok, #{triggers := Triggers, found := Found, stamp := Stamp, relay := Relay}}, St) ->
    [gen_server:reply(W, ok) || W <- St#st.waiters],
    St1 = St#st{phase = running, error = none, waiters = [], triggers = Triggers, seen = #{}, armed = true,
                stamp = Stamp},
    Known = [P || #{path := P} <- St#st.snaps],
    St2 = keep([S || #{path := P} = S <- Found, not lists:member(P, Known)], schedule_poll(relayed(Relay, St1))),
    unseen_rearm(St2);
setup_done({error, Why}, St) ->
    %% The recorder's directory, if it made it and nothing is in it.
    _ = St#st.snaps =:= [] andalso file:del_dir(maps:get(dir, St#st.ctx)),
    [gen_server:reply(W, {error, Why}) || W <- St#st.waiters],
    St#st.waiters =:= [] andalso
        logger:warning("dtrace_recorder ~p: not recording: ~p; trying again in ~b ms",
                       [maps:get(name, St#st.conf), Why, maps:get(check_ms, St#st.conf)]),
    St#st{phase = degraded, error = Why, waiters = []}.

snapshot_done(From, Prev, {ok, Snap, {relay_down, _} = Down}, St) ->
    #{path := Path} = Snap,
    St1 = relayed(Down, St),
    logger:warning("dtrace_recorder ~p: snapshot written to ~ts instead of the relay",
                   [maps:get(name, St#st.conf), Path]),
    snapshot_done(From, Prev, {ok, Snap}, St1#st{relay = maps:update_with(fallbacks, fun(N) -> N + 1 end,
                                                                           St1#st.relay)});
snapshot_done(From, _Prev, {ok, Snap}, #st{triggers = Ts, conf = #{min_interval_ms := Min}} = St) ->
    reply(From, {ok, Snap}),
    %% The triggers rest until the interval is over: one firing now would
    %% write a snapshot only to have it deleted.
    St1 = case Ts =/= [] andalso Min > 0 andalso St#st.armed of
              true -> schedule_rearm(erlang:monotonic_time(millisecond) + Min, enqueue(disarm, St));
              false -> St
          end,
    keep([Snap], relayed(relay_of(Snap), St1));
snapshot_done(From, Prev, {error, Why}, St) ->
    reply(From, {error, Why}),
    logger:warning("dtrace_recorder ~p: snapshot failed: ~p", [maps:get(name, St#st.conf), Why]),
    lost_daemon(Why, count(failed, 1, St#st{last_snap = Prev})).

poll_done(Found, St) when is_list(Found) ->
    polled(Found, schedule_poll(count(polls, 1, St)));
poll_done(_Result, St) ->
    St.

adopt_done(_Name, {ok, Snap}, St) ->
    keep([Snap], relayed(relay_of(Snap), St));
adopt_done(Name, {error, Why}, St) ->
    logger:warning("dtrace_recorder ~p: trigger snapshot ~ts not kept: ~p",
                   [maps:get(name, St#st.conf), Name, Why]),
    count(failed, 1, St).

check_done({ok, Check}, St) ->
    checked(Check, St);
check_done(Result, St) ->
    failed(check, Result, St).

rearm_done({ok, Triggers}, St) ->
    unseen_rearm(St#st{triggers = Triggers, armed = true});
rearm_done(Result, St) ->
    failed(rearm, Result, St).

disarm_done(ok, St) ->
    St#st{armed = false};
disarm_done(Result, St) ->
    %% Those still there fire once at most, as before.
    rearm_done(Result, St).

failed(Op, {error, Why}, St) ->
    logger:warning("dtrace_recorder ~p: ~p failed: ~p", [maps:get(name, St#st.conf), Op, Why]),
    St#st{phase = degraded, error = Why};
failed(_Op, _Result, St) ->
    St.

count(Key, N, #st{counts = C} = St) ->
    St#st{counts = maps:update_with(Key, fun(V) -> V + N end, C)}.

%% The session is gone with its daemon: set up again at the next check.
lost_daemon({no_session_daemon, _} = Why, St) -> St#st{phase = degraded, error = Why};
lost_daemon({lttng_timeout, _} = Why, St) -> St#st{phase = degraded, error = Why};
lost_daemon(_Why, St) -> St.

%%% The relay

relay_of(#{relay := sent}) -> up;
relay_of(_) -> none.

%% What a job says of the relay: none (no relay, or nothing learnt), up,
%% or {relay_down, Why} (logged when it was not down already).
relayed(none, St) ->
    St;
relayed(up, #st{relay = R} = St) ->
    St#st{relay = R#{state => up, error => none}};
relayed({relay_down, Why}, #st{relay = R, ctx = #{relay := #{url := Url}, dir := Dir}} = St) ->
    _ = maps:get(state, R) =:= relay_down orelse
        logger:warning("dtrace_recorder ~p: relay ~s down: ~p; snapshots go to ~ts until it answers",
                       [maps:get(name, St#st.conf), Url, Why, Dir]),
    St#st{relay = R#{state => relay_down, error => Why}}.

%% Where the recorder cannot see the relay's copies, it cannot see a
%% trigger fire either: its triggers are re-armed every min_interval_ms
%% (at least check_ms) instead.
unseen_rearm(#st{ctx = #{relay := #{}, seen := none}, triggers = [_ | _],
                 conf = #{min_interval_ms := Min, check_ms := Check}} = St) ->
    schedule_rearm(erlang:monotonic_time(millisecond) + max(Min, Check), St);
unseen_rearm(St) ->
    St.

%% A trigger's snapshot the relay did not take: taken again, locally if
%% the relay still does not answer (the ring buffers still hold it,
%% unless check_ms was longer than they last).
relay_retry(_Failed, #st{ctx = #{relay := none}} = St) ->
    St;
relay_retry(Failed, St) ->
    Info = #{source => trigger, reason => trigger_reason(St), origin => node(), tag => undefined},
    enqueue({snapshot_request, Info, none}, relayed({relay_down, {trigger_snapshot_failed, Failed}}, St)).

%%% The snapshots on disk

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

complete(Name, #st{conf = #{min_interval_ms := Min}, last_snap = Last, ctx = #{seen := Dir}} = St) ->
    Now = erlang:monotonic_time(millisecond),
    St1 = St#st{seen = maps:remove(Name, St#st.seen), ignored = [Name | St#st.ignored]},
    %% The trigger that fired is spent (once-after:1): every trigger is
    %% re-armed when the interval is over.
    St2 = schedule_rearm(Now + Min, St1),
    case Last of
        L when is_integer(L), Now - L < Min ->
            enqueue({delete, [filename:join(Dir, Name)]}, count(suppressed, 1, St2));
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
            relay_retry(Failed, schedule_rearm(Now + Min, count(failed, length(Failed),
                                                                 St#st{triggers = Ours1})))
    end;
checked(#{session := State}, St) ->
    enqueue(setup, St#st{phase = degraded, error = {session_lost, State}}).

meta(Info, #st{conf = Conf, ctx = #{session := Session}, triggers = Triggers}) ->
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

status_map(#st{ctx = Ctx, counts = Counts} = St) ->
    Status = #{phase => St#st.phase, error => St#st.error,
               session => list_to_binary(maps:get(session, Ctx)),
               dir => unicode:characters_to_binary(maps:get(dir, Ctx)),
               triggers => [list_to_binary(N) || #{name := N} <- St#st.triggers],
               snapshots => length(St#st.snaps), suppressed => maps:get(suppressed, Counts),
               failed => maps:get(failed, Counts), polls => maps:get(polls, Counts)},
    case Ctx of
        #{relay := none} ->
            Status;
        #{relay := #{url := Url}, seen := Seen} ->
            Status#{relay => (St#st.relay)#{url => list_to_binary(Url),
                                            dir => case Seen of
                                                       none -> none;
                                                       _ -> unicode:characters_to_binary(Seen)
                                                   end}}
    end.
