%%% @doc Run-time providers: an application names its own provider and
%%% probes while the node runs, and bpftrace, perf, gdb and SystemTap see
%%% them like probes compiled into a library.
%%%
%%% {@link new/2} writes an ELF shared object with one probe site, one
%%% semaphore and one `.note.stapsdt' note per probe into the node's
%%% private directory and loads it; {@link path/1} names the file for
%%% tracer commands. A probe call while no tracer listens reads the probe's
%%% semaphore and returns `false' without converting its arguments.
%%% ```
%%% 1> {ok, P} = dtrace_provider:new(myapp, [{request__start, [int, string]},
%%%                                        {request__done, [int, int]}]).
%%% {ok,#Ref<0.2823316555.1743126535.129371>}
%%% 2> dtrace_provider:path(P).
%%% <<"/tmp/dtrace-32637-wgSx9Q/myapp.1.so">>
%%% 3> dtrace_provider:fire(P, request__start, [42, <<"GET /">>]).
%%% false
%%% '''
%%% As root, with the node's OS pid and that path (`$PID', `$PATH'), while
%%% the call is made again (output of a real session):
%%% ```
%%% # bpftrace -p $PID -e 'usdt:$PATH:myapp:request__start
%%%       { printf("%ld %s\n", arg0, str(arg1)); }'
%%% Attaching 1 probe...
%%% 42 GET /
%%% '''
%%% The same call now returns `true'. The count of `true' returns is the
%%% count of events the tracer received.
%%%
%%% == Arguments ==
%%% A probe takes up to 12 arguments, each `int' or `string', declared
%%% when the provider is defined. They are converted as {@link dtrace:p/4}
%%% converts its arguments: an `int' is any integer that fits a signed 64-bit
%%% word, anything else is passed as 0; a `string' is an iolist or binary
%%% within {@link dtrace}'s limits, anything else is passed as NULL.
%%% Argument k is in the same register as argument k of every probe of this
%%% library (docs/reference.md, "Argument registers"); bpftrace older than
%%% 0.24 reads the seventh on through `priv/bin/dtrace-bpftrace'
%%% (docs/tracers.md, "Arguments past arg5").
%%%
%%% == Lifetime ==
%%% A provider lives while any of its handles (provider or probe handles)
%%% is referenced. {@link delete/1} removes its file and frees its name at
%%% once; later calls return `false'. When the last handle is
%%% garbage-collected, the object is unloaded (and its file removed, if
%%% `delete/1' was not called). Tracers attached to a deleted provider stay
%%% attached and see nothing more; a provider defined again under the same
%%% name is a new file, to which tracers attach anew.
%%%
%%% == Limits ==
%%% <ul>
%%% <li>Names: a provider name is an atom or a string, a probe name an
%%%   atom; both C identifiers (`[A-Za-z_][A-Za-z0-9_]*', `__' allowed) of
%%%   at most 64 bytes. (perf names a probe's event group `sdt_<provider>'
%%%   and takes at most 64 bytes for it: keep provider names to 60 bytes for
%%%   perf.)</li>
%%% <li>At most 1024 probes per provider, 12 arguments per probe, and
%%%   1024 providers loaded in a node at once; a deleted provider counts until
%%%   its last handle is garbage-collected.</li>
%%% <li>Files: `$TMPDIR/dtrace-<OS pid>-XXXXXX/<provider>.<n>.so' (`/tmp'
%%%   without `TMPDIR'), the directory created with mode 0700, files 0600.
%%%   A file is removed on `delete/1', when its provider is
%%%   garbage-collected, and when the node's OS process exits; the
%%%   directories of nodes that died without exiting are removed when
%%%   another node of the same user first defines a provider. The
%%%   directory must allow mapping code (not `noexec').</li>
%%% <li>Linux on x86_64 or aarch64 only (where the library's probes are
%%%   SDT probes); elsewhere {@link new/2} returns
%%%   `{error, unavailable}'.</li>
%%% </ul>
%%% @end
-module(dtrace_provider).

-export([new/2, fire/3, fire/2, is_enabled/3, is_enabled/2, is_enabled/1, probe/2, path/1, delete/1]).

-opaque provider() :: reference().
%% A provider handle (a NIF resource).
-opaque probe() :: reference().
%% A probe handle: one probe of a provider, for {@link fire/2}.
-type probe_name() :: atom().
%% A C identifier of at most 64 bytes, such as `request__start'.
-type arg_type() :: int | string.
%% `int': a signed 64-bit integer. `string': a NUL-terminated string of at
%% most 1024 bytes, or NULL.
-type arg() :: integer() | iodata() | term().
%% An integer for an `int' argument, an iolist or binary for a `string'
%% one; any other term is passed as 0 or NULL.
-type reason() :: unavailable
                | {invalid_provider_name, term()}
                | {invalid_probes, term()}
                | no_probes
                | {invalid_probe, term()}
                | {invalid_probe_name, term()}
                | {invalid_arg_type, probe_name(), term()}
                | {too_many_args, probe_name(), 12}
                | {duplicate_probe, probe_name()}
                | {too_many_probes, 1024}
                | {already_defined, atom() | unicode:chardata()}
                | {too_many_providers, 1024}
                | {file_error, file:posix() | unknown}
                | {dlopen_failed, binary()}.
%% Why {@link new/2} failed; see there.

-export_type([provider/0, probe/0, probe_name/0, arg_type/0, arg/0, reason/0]).

%% @doc Defines provider `Provider' with `Probes' and loads it: a new file
%% in the node's private directory, loaded into the node.
%%
%% `Provider' is an atom or a string (a charlist, binary or iolist);
%% `Probes' a non-empty list of `{ProbeName, ArgTypes}', `ProbeName' an
%% atom, `ArgTypes' a list of at most 12 `int' and `string'. Both names are
%% C identifiers of at most 64 bytes.
%%
%% Returns `{ok, Provider}', a provider handle, or `{error, Reason}' for the
%% first of these problems found, checked in this order:
%% <ul>
%% <li>`{invalid_provider_name, Provider}': not an atom or string that is a
%%   C identifier of 1 to 64 bytes (so `"../x"' and `"a/b"' are refused:
%%   a name never reaches a path unchecked);</li>
%% <li>`{invalid_probes, Probes}': not a proper list; `no_probes': `[]';</li>
%% <li>for each probe, in order: `{invalid_probe, Entry}' (not a
%%   `{ProbeName, ArgTypes}' tuple with a proper list of types),
%%   `{invalid_probe_name, ProbeName}', `{invalid_arg_type, ProbeName,
%%   Type}' (neither `int' nor `string'), `{too_many_args, ProbeName, 12}',
%%   `{duplicate_probe, ProbeName}';</li>
%% <li>`{too_many_probes, 1024}';</li>
%% <li>`{already_defined, Provider}': a provider of that name is defined in
%%   this node and not deleted;</li>
%% <li>`{too_many_providers, 1024}': 1024 providers are loaded, also after
%%   collecting the caller's garbage (a deleted provider stays loaded until
%%   its last handle is collected; this function collects the calling
%%   process's garbage and tries again before it gives up);</li>
%% <li>`{file_error, Posix}': the private directory or the file could not
%%   be created (`enospc', `eacces', ...);</li>
%% <li>`{dlopen_failed, Path}': the loader refused the file, typically
%%   because the temporary directory is mounted `noexec' (set `TMPDIR' to
%%   another directory);</li>
%% <li>`unavailable': the NIF is not loaded, or the platform has no SDT
%%   probes.</li>
%% </ul>
-spec new(Provider :: atom() | unicode:chardata(),
          Probes :: [{ProbeName :: probe_name(), ArgTypes :: [arg_type()]}]) ->
          {ok, provider()} | {error, reason()}.
new(Provider, Probes) ->
    case dtrace_nif:provider_new(Provider, Probes) of
        {error, {too_many_providers, _}} ->
            %% Deleted providers whose handles are garbage in this process
            %% still count: collect them and try again.
            erlang:garbage_collect(),
            new_again(Provider, Probes, 20);
        Result ->
            Result
    end.

%% The VM runs resource destructors shortly after a collection (as a
%% scheduler's auxiliary work), not during it: wait for them, 1 ms at a
%% time, N times at most.
new_again(Provider, Probes, N) ->
    timer:sleep(1),
    case dtrace_nif:provider_new(Provider, Probes) of
        {error, {too_many_providers, _}} when N > 1 -> new_again(Provider, Probes, N - 1);
        Result -> Result
    end.

%% @doc Fires probe `ProbeName' of `Provider' with `Args', one term per
%% declared argument.
%%
%% Returns `false' when no tracer listens (checked before any argument is
%% converted) or the provider is deleted, and `true' when the probe fired.
%% Arguments are converted as described in the module doc. Raises
%% `error:badarg' when `Provider' is not a provider handle, `ProbeName' is
%% not one of its probes, or `Args' is not a list of as many terms as the
%% probe has arguments, whether or not a tracer listens (so a mistake shows
%% before anyone traces); on a deleted provider, returns `false' instead.
-spec fire(Provider :: provider(), ProbeName :: probe_name(), Args :: [arg()]) -> boolean().
fire(Provider, ProbeName, Args) ->
    dtrace_nif:provider_fire(Provider, ProbeName, Args).

%% @doc Fires the probe of probe handle `Probe' (from {@link probe/2})
%% with `Args': {@link fire/3} without looking the probe up by name.
%% Returns and raises as `fire/3' does.
-spec fire(Probe :: probe(), Args :: [arg()]) -> boolean().
fire(Probe, Args) ->
    dtrace_nif:provider_fire(Probe, Args).

%% @doc `true' while a tracer listens on probe `ProbeName' of `Provider':
%% one semaphore read. For arguments that are costly to compute. `false'
%% on a deleted provider; raises `error:badarg' as {@link fire/3} does for
%% a bad handle or probe name.
%%
%% With a probe handle and an integer, `is_enabled(Probe, ArgCount)' is
%% {@link is_enabled/3} for the handle's probe.
-spec is_enabled(Provider :: provider(), ProbeName :: probe_name()) -> boolean();
                (Probe :: probe(), ArgCount :: non_neg_integer()) -> boolean().
is_enabled(Probe, ArgCount) when is_integer(ArgCount) ->
    dtrace_nif:provider_probe_is_enabled(Probe, ArgCount);
is_enabled(Provider, ProbeName) ->
    dtrace_nif:provider_is_enabled(Provider, ProbeName).

%% @doc {@link is_enabled/2}, checking also that the probe takes
%% `ArgCount' arguments: raises `error:badarg' otherwise, whether or not a
%% tracer listens, as {@link fire/3} does for a list of `ArgCount' terms.
%% For code that decides whether to compute the arguments before calling
%% `fire/3' (the Elixir macro `DTrace.Provider.fire/3' does), so that a
%% wrong count shows before anyone traces. One NIF call.
-spec is_enabled(Provider :: provider(), ProbeName :: probe_name(), ArgCount :: non_neg_integer()) ->
          boolean().
is_enabled(Provider, ProbeName, ArgCount) ->
    dtrace_nif:provider_is_enabled(Provider, ProbeName, ArgCount).

%% @doc `true' while a tracer listens on the probe of probe handle
%% `Probe'; as {@link is_enabled/2}.
-spec is_enabled(Probe :: probe()) -> boolean().
is_enabled(Probe) ->
    dtrace_nif:provider_is_enabled(Probe).

%% @doc The probe handle of probe `ProbeName' of `Provider', for
%% {@link fire/2} and {@link is_enabled/1}. It keeps the provider alive as
%% a provider handle does. Raises `error:badarg' when `Provider' is not a
%% provider handle or `ProbeName' not one of its probes.
-spec probe(Provider :: provider(), ProbeName :: probe_name()) -> probe().
probe(Provider, ProbeName) ->
    dtrace_nif:provider_probe(Provider, ProbeName).

%% @doc The path of the provider's object file (of a provider or probe
%% handle), the one to name in tracer commands
%% (`usdt:PATH:provider:probe'). The file no longer exists once the
%% provider is deleted. Raises `error:badarg' for a term that is not a
%% handle.
-spec path(Handle :: provider() | probe()) -> binary().
path(Handle) ->
    dtrace_nif:provider_path(Handle).

%% @doc Deletes the provider of `Handle' (a provider or probe handle): its
%% probes' calls return `false' from now on, its file is removed, and its
%% name can be defined again. The object is unloaded when the last handle is
%% garbage-collected. Returns `ok', also when it was deleted before; raises
%% `error:badarg' for a term that is not a handle.
-spec delete(Handle :: provider() | probe()) -> ok.
delete(Handle) ->
    dtrace_nif:provider_delete(Handle).
