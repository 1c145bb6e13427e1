%%% Test helper: the library under test and its catalogue: the NIF's path,
%%% its SDT notes as readelf lists them, the catalogue as the
%%% dtrace-catalogue command prints it, the repository root.
-module(dtrace_test_catalogue).

-export([nif_path/0, repo_root/0, notes/1, catalogue/0, site/0, feeds/0, events/0]).

%% Absolute path of the NIF the tests trace.
nif_path() ->
    filename:join(code:priv_dir(dtrace), "dtrace_nif.so").

%% The repository this test code belongs to (this file is in test/support/).
repo_root() ->
    filename:dirname(filename:dirname(filename:dirname(?FILE))).

%% The library's SDT notes, as readelf -n lists them, in order:
%% [#{provider, name, location, base, semaphore (integers), args (the
%% argument specs, e.g. [<<"8@%rdi">>, ...])}].
notes(Path) ->
    {0, Lines} = dtrace_test_tracer:run("readelf", ["-n", Path]),
    notes(Lines, undefined, []).

notes([<<"    Provider: ", P/binary>> | Rest], _, Acc) ->
    notes(Rest, P, Acc);
notes([<<"    Name: ", Name/binary>>, Loc, <<"    Arguments:", Args/binary>> | Rest], P, Acc) ->
    {match, [L, B, S]} = re:run(Loc, "Location: 0x([0-9a-f]+), Base: 0x([0-9a-f]+), Semaphore: 0x([0-9a-f]+)",
                                [{capture, all_but_first, list}]),
    [Location, Base, Semaphore] = [list_to_integer(X, 16) || X <- [L, B, S]],
    Note = #{provider => P, name => Name, location => Location, base => Base,
             semaphore => Semaphore, args => string:lexemes(Args, " ")},
    notes(Rest, P, [Note | Acc]);
notes([_ | Rest], P, Acc) ->
    notes(Rest, P, Acc);
notes([], _, Acc) ->
    lists:reverse(Acc).

%% The probe catalogue (native/dtrace_nif/probes.d), every probe expanded,
%% as the build installed it (priv/dtrace_probes.eterm, for this machine):
%% [{Name, [{ArgName, Type, Register, NoteSpec}]}], all binaries.
catalogue() ->
    [{list_to_binary(N), [{list_to_binary(A), list_to_binary(T), list_to_binary(R), list_to_binary(S)}
                          || {A, T, R, S} <- Args]}
     || {probe, N, Args} <- terms()].

%% The machine code of every probe site on this machine (the catalogue's
%% `Arch::site', as the build installed it): a list of bytes.
site() ->
    [Site] = [S || {site, S} <- terms()],
    Site.

%% The VM feed table: [#{on, flags, tags, sdt, lttng, fmt, auto}], probes
%% and events as binaries.
feeds() ->
    [#{on => On, flags => Flags, tags => Tags, sdt => [list_to_binary(P) || P <- Sdt],
       lttng => [list_to_binary(E) || E <- Lttng], fmt => Fmt, auto => Auto}
     || {feed, On, Flags, Tags, Sdt, Lttng, Fmt, Auto} <- terms()].

%% The LTTng events (the probes' org_erlang_dtrace ones, then OTP's
%% org_erlang_dyntrace ones): [{<<"provider:event">>, [{Field, Type}]}].
events() ->
    [{list_to_binary(N), Fields} || {event, N, Fields} <- terms()].

terms() ->
    {ok, Terms} = file:consult(filename:join(code:priv_dir(dtrace), "dtrace_probes.eterm")),
    Terms.
