%%% @doc The `lttng' command, as the flight recorder ({@link
%%% dtrace_recorder}) uses it: sessions, channels, event rules, triggers and
%%% snapshots of LTTng 2.13, and the catalogue of the LTTng events this
%%% library (and OTP's VM events) define, which options are checked
%%% against.
%%%
%%% Every call goes through {@link dtrace_recorder_cli:run/3}: a process of
%%% its own, a timeout, the OS process killed when it is up. Lists are read
%%% from lttng's machine interface (`lttng --mi xml'), not from its text.
%%% Errors are classified so that a user reads what to do:
%%% <ul>
%%% <li>`{lttng_missing, Hint}': no `lttng' executable;</li>
%%% <li>`{no_session_daemon, Hint}': no `lttng-sessiond' for this user;</li>
%%% <li>`{lttng_timeout, Command}': `lttng' did not answer in time (a hung
%%%   or stopped session daemon); it was killed;</li>
%%% <li>`{bad_filter, Command, Output}': LTTng refused a filter
%%%   expression;</li>
%%% <li>`{relay_down, Command, Output}': the session daemon could not
%%%   reach the relay daemon (`lttng-relayd') a snapshot was to go to: none
%%%   listens there, or it did not answer within the session daemon's
%%%   `LTTNG_NETWORK_SOCKET_TIMEOUT';</li>
%%% <li>`{lttng_failed, Command, Output}': anything else (exit status not
%%%   0).</li>
%%% </ul>
%%% @end
-module(dtrace_recorder_lttng).

-export([events/0, event_fields/1, numbered_event/0, match_events/1, filter_fields/1]).
-export([relay_url/1, relay_probe/2]).
-export([cmd/2, sessions/1, session_state/2, triggers/1,
         create/5, add_trigger/5, remove_trigger/2, destroy/2, snapshot/3, snapshot/4,
         registered_events/2]).

-export_type([ctx/0, error_reason/0, output/0, relay/0]).

-type ctx() :: #{lttng := string(), timeout := pos_integer()}.
%% The `lttng' executable and the timeout of each call, in milliseconds.
-type error_reason() :: {lttng_missing, binary()}
                      | {no_session_daemon, binary()}
                      | {lttng_timeout, binary()}
                      | {bad_filter, binary(), binary()}
                      | {relay_down, binary(), binary()}
                      | {lttng_failed, binary(), binary()}.
-type output() :: {file, Dir :: file:filename()} | {relay, Url :: string()}.
%% Where a snapshot goes: a local directory, or a relay daemon (an LTTng
%% network URL, `net://HOST:CTRL:DATA/TRACEDIR'; see {@link relay_url/1}).
-type relay() :: #{url := string(), host := string(), ctrl := inet:port_number(),
                   data := inet:port_number(), family := inet | inet6}.
%% A relay daemon's address, from {@link relay_url/1}: `url' is the URL
%% with both ports, `net://HOST:CTRL:DATA' (`net6://[ADDR]:CTRL:DATA').

%% (Built at run time: their type is binary(), not a literal's size.)
-define(MISSING_HINT, iolist_to_binary([<<"lttng not found (PATH, or the lttng option): install lttng-tools "
                                          "(Debian/Ubuntu: apt-get install lttng-tools)">>])).
-define(DAEMON_HINT, iolist_to_binary([<<"no LTTng session daemon for this user: start one as the node's "
                                         "user (or root), e.g. `lttng-sessiond --daemonize`">>])).
-define(CHANNEL, "dtrace-rec").

%%% The catalogue

%% @doc The LTTng events this library's NIF defines (provider
%% `org_erlang_dtrace': user, file and span probes) and the VM events with
%% OTP's names (provider `org_erlang_dyntrace'), with their payload field
%% names: `[{<<"provider:event">>, [FieldName]}]'. From the catalogue
%% build.rs writes, `priv/dtrace_probes.eterm' (its `event' entries), read
%% once per node. The suite checks it against what a live node registers
%% (`registered_events/2').
-spec events() -> [{binary(), [binary()]}].
events() ->
    case persistent_term:get({?MODULE, events}, undefined) of
        undefined ->
            File = filename:join(code:priv_dir(dtrace), "dtrace_probes.eterm"),
            case file:consult(File) of
                {ok, Terms} ->
                    Events = [{list_to_binary(N), [list_to_binary(F) || {F, _Type} <- Fields]}
                              || {event, N, Fields} <- Terms],
                    persistent_term:put({?MODULE, events}, Events),
                    Events;
                {error, _} ->
                    %% No catalogue (a broken install): no event is known,
                    %% so every pattern is refused with a reason.
                    []
            end;
        Events ->
            Events
    end.

%% @doc The payload field names of event `Name' (`<<"provider:event">>'),
%% or `error' when the catalogue has no such event.
-spec event_fields(Name :: binary()) -> {ok, [binary()]} | error.
event_fields(Name) ->
    case lists:keyfind(Name, 1, events()) of
        {_, Fields} -> {ok, Fields};
        false -> error
    end.

%% @doc The LTTng event of the numbered user probes (`dtrace:pn/N'): the
%% catalogue's event with a `label' field, which `probes.d' makes of a
%% numbered family (`#pragma dtrace_nif numbered'). `error' when the
%% catalogue has none (a broken install).
-spec numbered_event() -> {ok, binary()} | error.
numbered_event() ->
    case [N || {N, [<<"label">> | _]} <- events()] of
        [Name | _] -> {ok, Name};
        [] -> error
    end.

%% @doc The catalogue's events that LTTng event-name pattern `Pattern'
%% matches (`*' matches any run of characters, as in `lttng
%% enable-event'). An empty list means the pattern names nothing this
%% library or the VM defines.
-spec match_events(Pattern :: binary()) -> [binary()].
match_events(Pattern) ->
    Re = ["^", [case C of
                    $* -> ".*";
                    _ -> re_quote(C)
                end || <<C>> <= Pattern], "$"],
    {ok, MP} = re:compile(Re),
    [N || {N, _} <- events(), re:run(N, MP, [{capture, none}]) =:= match].

re_quote(C) when (C >= $a andalso C =< $z); (C >= $A andalso C =< $Z); (C >= $0 andalso C =< $9);
                 C =:= $_ ->
    C;
re_quote(C) ->
    [$\\, C].

%% @doc The payload field names an LTTng filter expression refers to (the
%% identifiers outside string literals, other than `$ctx.NAME' and
%% `$app.PROVIDER:NAME' context fields), so that a trigger on a field an
%% event does not have is refused: LTTng itself accepts such a filter,
%% which then never matches. `error' for an unterminated string literal.
-spec filter_fields(Filter :: binary()) -> {ok, [binary()]} | error.
filter_fields(Filter) ->
    scan(Filter, []).

scan(<<>>, Acc) ->
    {ok, lists:usort(Acc)};
scan(<<$", Rest/binary>>, Acc) ->
    case skip_string(Rest) of
        {ok, Rest1} -> scan(Rest1, Acc);
        error -> error
    end;
scan(<<$$, Rest/binary>>, Acc) ->
    %% $ctx.vpid, $app.provider:type: a context, not a payload field.
    scan(skip_word(Rest, fun(C) -> ident(C) orelse C =:= $. orelse C =:= $: end), Acc);
scan(<<$., Rest/binary>>, Acc) ->
    %% a.b: a member of a structure field, not a field of its own
    scan(skip_word(Rest, fun ident/1), Acc);
scan(<<C, _/binary>> = Bin, Acc) when C >= $0, C =< $9 ->
    scan(skip_word(Bin, fun(X) -> ident(X) orelse X =:= $. end), Acc);
scan(<<C, _/binary>> = Bin, Acc) when C =:= $_; (C >= $a andalso C =< $z); (C >= $A andalso C =< $Z) ->
    {Word, Rest} = take_word(Bin, <<>>),
    scan(Rest, [Word | Acc]);
scan(<<_, Rest/binary>>, Acc) ->
    scan(Rest, Acc).

skip_string(<<$\\, _, Rest/binary>>) -> skip_string(Rest);
skip_string(<<$", Rest/binary>>) -> {ok, Rest};
skip_string(<<_, Rest/binary>>) -> skip_string(Rest);
skip_string(<<>>) -> error.

skip_word(<<C, Rest/binary>> = Bin, Pred) ->
    case Pred(C) of
        true -> skip_word(Rest, Pred);
        false -> Bin
    end;
skip_word(<<>>, _) ->
    <<>>.

take_word(<<C, Rest/binary>>, Acc) ->
    case ident(C) of
        true -> take_word(Rest, <<Acc/binary, C>>);
        false -> {Acc, <<C, Rest/binary>>}
    end;
take_word(<<>>, Acc) ->
    {Acc, <<>>}.

ident(C) ->
    C =:= $_ orelse (C >= $a andalso C =< $z) orelse (C >= $A andalso C =< $Z)
        orelse (C >= $0 andalso C =< $9).

%%% Relay daemons

%% @doc The relay daemon (`lttng-relayd') of URL `Url' (a string or a
%% binary), in LTTng's network URL syntax without its trace directory:
%% `net://HOST', `net://HOST:CTRL' or `net://HOST:CTRL:DATA', and
%% `net6://[ADDR]' likewise; HOST a host name or IPv4 address, the ports
%% 1..65535, by default LTTng's 5342 (control) and 5343 (data). `error' for
%% anything else: another scheme, a path (the recorder adds its own trace
%% directory), equal ports.
-spec relay_url(Url :: string() | binary()) -> {ok, relay()} | error.
relay_url(Url) when is_binary(Url) ->
    case unicode:characters_to_list(Url) of
        L when is_list(L) -> relay_url(L);
        _ -> error
    end;
relay_url("net://" ++ Rest) ->
    {Host, Ports} = lists:splitwith(fun(C) -> C =/= $: end, Rest),
    case host_name(Host) of
        true -> relay(inet, Host, Host, Ports);
        false -> error
    end;
relay_url("net6://[" ++ Rest) ->
    case lists:splitwith(fun(C) -> C =/= $] end, Rest) of
        {Addr, "]" ++ Ports} ->
            case inet:parse_ipv6strict_address(Addr) of
                {ok, _} -> relay(inet6, Addr, "[" ++ Addr ++ "]", Ports);
                {error, _} -> error
            end;
        _ ->
            error
    end;
relay_url(_) ->
    error.

relay(Family, Host, UrlHost, Ports) ->
    Scheme = case Family of inet -> "net://"; inet6 -> "net6://" end,
    case ports(Ports) of
        {ok, Ctrl, Data} when Ctrl =/= Data ->
            {ok, #{url => Scheme ++ UrlHost ++ ":" ++ integer_to_list(Ctrl) ++ ":" ++ integer_to_list(Data),
                   host => Host, ctrl => Ctrl, data => Data, family => Family}};
        _ ->
            error
    end.

ports("") -> {ok, 5342, 5343};
ports(":" ++ Rest) ->
    case string:split(Rest, ":") of
        [C] -> port_pair(C, "5343");
        [C, D] -> port_pair(C, D)
    end;
ports(_) -> error.

port_pair(C, D) ->
    case {port(C), port(D)} of
        {{ok, Ctrl}, {ok, Data}} -> {ok, Ctrl, Data};
        _ -> error
    end.

port([_ | _] = S) ->
    case lists:all(fun(C) -> C >= $0 andalso C =< $9 end, S) andalso length(S) =< 5
        andalso list_to_integer(S) of
        P when is_integer(P), P >= 1, P =< 65535 -> {ok, P};
        _ -> error
    end;
port(_) ->
    error.

host_name([_ | _] = H) when length(H) =< 253 ->
    lists:all(fun(C) -> (C >= $a andalso C =< $z) orelse (C >= $A andalso C =< $Z)
                            orelse (C >= $0 andalso C =< $9) orelse C =:= $. orelse C =:= $-
              end, H)
        andalso hd(H) =/= $- andalso hd(H) =/= $.;
host_name(_) ->
    false.

%% @doc Whether relay daemon `Relay' accepts a connection on its control
%% port within `Timeout' milliseconds (the connection is closed at once,
%% nothing is sent). LTTng itself connects to the relay only when a
%% snapshot is recorded; this lets a recorder say at its start that its
%% snapshots will not get there. `ok' or `{error, Posix}'.
-spec relay_probe(Relay :: relay(), Timeout :: pos_integer()) -> ok | {error, term()}.
relay_probe(#{host := Host, ctrl := Ctrl, family := Family}, Timeout) ->
    case gen_tcp:connect(Host, Ctrl, [Family, binary, {active, false}], Timeout) of
        {ok, Sock} -> gen_tcp:close(Sock);
        {error, _} = Error -> Error
    end.

%% The URL of output Output, as lttng takes it.
output_url({file, Dir}) -> "file://" ++ Dir;
output_url({relay, Url}) -> Url.

%%% Commands

%% @doc Runs `lttng Args' with the context's executable and timeout, in
%% the C locale. Returns the output, or a classified error (see the
%% module documentation).
-spec cmd(Ctx :: ctx(), Args :: [string() | binary()]) -> {ok, binary()} | {error, error_reason()}.
cmd(#{lttng := Lttng, timeout := Timeout}, Args) ->
    Command = iolist_to_binary(lists:join(" ", ["lttng" | Args])),
    case dtrace_recorder_cli:run(Lttng, Args, #{timeout => Timeout,
                                                env => [{"LC_ALL", "C"}, {"LTTNG_ABORT_ON_ERROR", false}],
                                                max_output => 8 bsl 20}) of
        {ok, 0, Out} ->
            {ok, Out};
        {ok, _Status, Out} ->
            {error, classify(Command, Out)};
        {error, timeout} ->
            {error, {lttng_timeout, Command}};
        {error, {not_found, _}} ->
            {error, {lttng_missing, ?MISSING_HINT}};
        {error, {spawn, Why}} ->
            {error, {lttng_failed, Command, iolist_to_binary(io_lib:format("~0p", [Why]))}}
    end.

classify(Command, Out) ->
    Has = fun(S) -> binary:match(Out, S) =/= nomatch end,
    %% LTTng 2.16's `list' says "Failed to list recording sessions" where
    %% 2.13's said there is no session daemon.
    case {Has(<<"No session daemon is available">>) orelse Has(<<"Failed to list recording sessions">>),
          Has(<<"Invalid filter bytecode">>) orelse Has(<<"Parse error">>)
          orelse Has(<<"syntax error">>),
          Has(<<"Unable to connect to lttng-relayd">>)} of
        {true, _, _} -> {no_session_daemon, ?DAEMON_HINT};
        {_, true, _} -> {bad_filter, Command, trim(Out)};
        {_, _, true} -> {relay_down, Command, trim(Out)};
        _ -> {lttng_failed, Command, trim(Out)}
    end.

trim(Out) ->
    T = string:trim(Out),
    case byte_size(T) > 2000 of
        true -> <<(binary:part(T, 0, 2000))/binary, "...">>;
        false -> T
    end.

%% @doc The names of the recording sessions the session daemon of this
%% user has.
-spec sessions(Ctx :: ctx()) -> {ok, [binary()]} | {error, error_reason()}.
sessions(Ctx) ->
    case cmd(Ctx, ["--mi", "xml", "list"]) of
        {ok, Xml} -> {ok, [unescape(N) || N <- between(Xml, <<"<session><name>">>, <<"</name>">>)]};
        Error -> Error
    end.

%% @doc Whether session `Name' exists, and whether it is recording
%% (`active'), `inactive', or `missing'.
-spec session_state(Ctx :: ctx(), Name :: string()) ->
          {ok, active | inactive | missing} | {error, error_reason()}.
session_state(Ctx, Name) ->
    case cmd(Ctx, ["--mi", "xml", "list"]) of
        {ok, Xml} ->
            Sessions = binary:split(Xml, <<"<session>">>, [global]),
            Want = iolist_to_binary(["<name>", Name, "</name>"]),
            case [S || S <- tl(Sessions), binary:match(S, Want) =:= {0, byte_size(Want)}] of
                [S | _] ->
                    case binary:match(S, <<"<enabled>true</enabled>">>) of
                        nomatch -> {ok, inactive};
                        _ -> {ok, active}
                    end;
                [] ->
                    {ok, missing}
            end;
        Error ->
            Error
    end.

%% @doc The triggers of this user: `[{Name, ActionFailures}]', where
%% `ActionFailures' is the count of failed executions of the trigger's
%% actions that LTTng reports (a snapshot it could not write, for
%% example).
-spec triggers(Ctx :: ctx()) -> {ok, [{binary(), non_neg_integer()}]} | {error, error_reason()}.
triggers(Ctx) ->
    case cmd(Ctx, ["--mi", "xml", "list-triggers"]) of
        {ok, Xml} ->
            Parts = tl(binary:split(Xml, <<"<trigger><name>">>, [global])),
            {ok, [trigger(P) || P <- Parts]};
        Error ->
            Error
    end.

trigger(Part) ->
    [Name | _] = binary:split(Part, <<"</name>">>),
    Failures = case binary:split(Part, <<"<action_list>">>) of
                   [_, Actions] ->
                       lists:sum([binary_to_integer(V)
                                  || V <- between(Actions, <<"total execution failures</name>">>, <<"</value>">>,
                                                  <<"<value>">>)]);
                   [_] ->
                       0
               end,
    {unescape(Name), Failures}.

%% Every Text between Start and End.
between(Bin, Start, End) ->
    [V || P <- tl(binary:split(Bin, Start, [global])), [V | _] <- [binary:split(P, End)]].

%% Every Text after Start, then Mid, up to End (Start ... Mid Text End).
between(Bin, Start, End, Mid) ->
    [V || P <- tl(binary:split(Bin, Start, [global])),
          [_, After] <- [binary:split(P, Mid)],
          [V | _] <- [binary:split(After, End)]].

unescape(B) ->
    lists:foldl(fun({From, To}, Acc) -> binary:replace(Acc, From, To, [global]) end, B,
                [{<<"&lt;">>, <<"<">>}, {<<"&gt;">>, <<">">>}, {<<"&quot;">>, <<"\"">>},
                 {<<"&apos;">>, <<"'">>}, {<<"&amp;">>, <<"&">>}]).

%% @doc Creates snapshot-mode session `Name' writing its snapshots to
%% `Output' (under a local directory, or to a relay daemon, which puts them
%% under `HOSTNAME/TRACEDIR' of its output directory) as
%% `OutName-DATE-TIME-N' (the snapshot output's name), with one
%% user-space channel of `{SubBuffers, Bytes}' per CPU (per-user buffers,
%% overwrite mode), the `vpid' context, this node's process as the only
%% one tracked, and one event rule per `{Patterns, Filter}' of `Rules'
%% (patterns joined with commas); then starts it. On any failure the
%% session is destroyed again.
-spec create(Ctx, Name, {Output, OutName}, Buffer, Rules) -> ok | {error, error_reason()} when
      Ctx :: ctx(),
      Name :: string(),
      Output :: output(),
      OutName :: string(),
      Buffer :: {pos_integer(), pos_integer()},
      Rules :: [{[binary()], binary()}].
create(Ctx, Name, {Output, OutName}, {N, Size}, Rules) ->
    case cmd(Ctx, ["create", Name, "--snapshot", "--no-output"]) of
        {ok, _} ->
            Steps = [["snapshot", "add-output", "-s", Name, "--name=" ++ OutName, output_url(Output)],
                     ["enable-channel", "-u", "-s", Name, "--subbuf-size=" ++ integer_to_list(Size),
                      "--num-subbuf=" ++ integer_to_list(N), "--overwrite", "--buffers-uid", ?CHANNEL],
                     ["add-context", "-u", "-s", Name, "-c", ?CHANNEL, "-t", "vpid"],
                     %% Track this node's process only: the session's events
                     %% are then enabled in it and in no other process of the
                     %% host, whose probes keep their disabled cost (a filter
                     %% alone would enable them everywhere and drop the
                     %% events in each probe).
                     ["track", "-u", "-s", Name, "--vpid=" ++ os:getpid()]]
                ++ [["enable-event", "-u", "-s", Name, "-c", ?CHANNEL,
                     lists:join(",", Patterns), "--filter=" ++ binary_to_list(Filter)]
                    || {Patterns, Filter} <- Rules]
                ++ [["start", Name]],
            case steps(Ctx, Steps) of
                ok ->
                    ok;
                Error ->
                    _ = destroy(Ctx, Name),
                    Error
            end;
        Error ->
            Error
    end.

steps(_Ctx, []) ->
    ok;
steps(Ctx, [Args | Rest]) ->
    case cmd(Ctx, Args) of
        {ok, _} -> steps(Ctx, Rest);
        Error -> Error
    end.

%% @doc Adds trigger `Name': when user-space event `Event' matches
%% `Filter', a snapshot of session `Session', once (rate policy
%% `once-after:1'; the recorder re-arms it).
-spec add_trigger(Ctx, Name, Session, Event, Filter) -> ok | {error, error_reason()} when
      Ctx :: ctx(),
      Name :: string(),
      Session :: string(),
      Event :: binary(),
      Filter :: binary().
add_trigger(Ctx, Name, Session, Event, Filter) ->
    case cmd(Ctx, ["add-trigger", "--name=" ++ Name, "--condition=event-rule-matches", "--type=user",
                   "--name=" ++ binary_to_list(Event), "--filter=" ++ binary_to_list(Filter),
                   "--action=snapshot-session", Session, "--rate-policy=once-after:1"]) of
        {ok, _} -> ok;
        Error -> Error
    end.

%% @doc Removes trigger `Name'.
-spec remove_trigger(Ctx :: ctx(), Name :: string() | binary()) -> ok | {error, error_reason()}.
remove_trigger(Ctx, Name) ->
    case cmd(Ctx, ["remove-trigger", Name]) of
        {ok, _} -> ok;
        Error -> Error
    end.

%% @doc Destroys session `Name'.
-spec destroy(Ctx :: ctx(), Name :: string() | binary()) -> ok | {error, error_reason()}.
destroy(Ctx, Name) ->
    case cmd(Ctx, ["destroy", Name]) of
        {ok, _} -> ok;
        Error -> Error
    end.

%% @doc Takes a snapshot of session `Session' to its output, named
%% `SnapName'-DATE-TIME-N. Returns when it is written (sent, to a relay
%% daemon).
-spec snapshot(Ctx :: ctx(), Session :: string(), SnapName :: string()) -> ok | {error, error_reason()}.
snapshot(Ctx, Session, SnapName) ->
    case cmd(Ctx, ["snapshot", "record", "-s", Session, "--name=" ++ SnapName]) of
        {ok, _} -> ok;
        Error -> Error
    end.

%% @doc As {@link snapshot/3}, to `Output' instead of the session's own
%% output, for this snapshot only (`lttng snapshot record URL').
-spec snapshot(Ctx :: ctx(), Session :: string(), SnapName :: string(), Output :: output()) ->
          ok | {error, error_reason()}.
snapshot(Ctx, Session, SnapName, Output) ->
    case cmd(Ctx, ["snapshot", "record", "-s", Session, "--name=" ++ SnapName, output_url(Output)]) of
        {ok, _} -> ok;
        Error -> Error
    end.

%% @doc The user-space events OS process `OsPid' has registered with the
%% session daemon, with their field names (`lttng --mi xml list -u -f': the
%% machine interface, the same from LTTng 2.13 to 2.16, whose text output
%% changed): `[{<<"provider:event">>, [FieldName]}]'.
-spec registered_events(Ctx :: ctx(), OsPid :: string()) ->
          {ok, [{binary(), [binary()]}]} | {error, error_reason()}.
registered_events(Ctx, OsPid) ->
    case cmd(Ctx, ["--mi", "xml", "list", "-u", "-f"]) of
        {ok, Xml} ->
            Mine = iolist_to_binary(["<pid><id>", OsPid, "</id>"]),
            Pids = [P || P <- tl(binary:split(Xml, <<"<pid>">>, [global])),
                         binary:match(<<"<pid>", P/binary>>, Mine) =:= {0, byte_size(Mine)}],
            {ok, lists:usort([{unescape(E), [unescape(F) || F <- between(Ev, <<"<event_field><name>">>, <<"</name>">>)]}
                              || P <- Pids, Ev <- tl(binary:split(P, <<"<event><name>">>, [global])),
                                 [E | _] <- [binary:split(Ev, <<"</name>">>)]])};
        Error ->
            Error
    end.
