%%% @doc The flight recorder's snapshots on disk.
%%%
%%% A recorder writes into a directory of its own, `DIR/SESSION' (see
%%% {@link dtrace_recorder_session}). LTTng writes each snapshot there as a
%%% directory: `mSTAMPnID-DATE-TIME-N' for one the recorder asked for
%%% (`lttng snapshot record --name=mSTAMPnID'), `tSTAMP-DATE-TIME-N' for one
%%% a trigger took (the session's snapshot output, named when the session
%%% was created: STAMP, the creation time in ms, keeps the names of two
%%% incarnations of the session apart, as LTTng's counter N starts at 0
%%% again). Next to LTTng's files the recorder writes
%%% `dtrace-recorder.json', the snapshot's sidecar: the node, the reason,
%%% the time, and what triggered it, for {@link dtrace_recorder:report/1}
%%% (and for a person: it is plain JSON, read by the report script too).
%%% Nothing but these directories is ever deleted.
%%% @end
-module(dtrace_recorder_store).

-export([scan/1, dir_info/1, write_sidecar/2, read_sidecar/1, delete/1,
         check_writable/1, find_manual/2, json/1, json_decode/1]).

-export_type([entry/0, json/0]).

-type json() :: #{atom() | binary() => json()} | [json()] | integer() | binary() | atom().

-type entry() :: #{name := string(), kind := manual | trigger, path := string()}.

-define(SIDECAR, "dtrace-recorder.json").

%% @doc The snapshot directories in recorder directory `Dir', in name
%% order; `[]' when `Dir' cannot be listed.
-spec scan(Dir :: file:filename()) -> [entry()].
scan(Dir) ->
    case file:list_dir(Dir) of
        {ok, Names} ->
            [#{name => N, kind => K, path => filename:join(Dir, N)}
             || N <- lists:sort(Names), K <- [kind(N)], K =/= other];
        {error, _} ->
            []
    end.

kind([K, D | _] = Name) when (K =:= $m orelse K =:= $t), D >= $0, D =< $9 ->
    case string:split(Name, "-") of
        [_, _] when K =:= $m -> manual;
        [_, _] -> trigger;
        _ -> other
    end;
kind(_) -> other.

%% @doc The total size in bytes of the files under snapshot directory
%% `Path', and whether LTTng's `metadata' file is among them.
-spec dir_info(Path :: file:filename()) -> {non_neg_integer(), boolean()}.
dir_info(Path) ->
    filelib:fold_files(Path, ".", true,
                       fun(F, {Size, Meta}) ->
                               {Size + filelib:file_size(F), Meta orelse filename:basename(F) =:= "metadata"}
                       end, {0, false}).

%% @doc The directory (name) of the snapshot the recorder took with
%% `lttng snapshot record --name=Prefix', if it is there.
-spec find_manual(Dir :: file:filename(), Prefix :: string()) -> {ok, string()} | error.
find_manual(Dir, Prefix) ->
    case [N || #{name := N} <- scan(Dir), lists:prefix(Prefix ++ "-", N)] of
        [Name | _] -> {ok, Name};
        [] -> error
    end.

%% @doc Writes sidecar `Meta' (a map of atoms to integers, binaries,
%% atoms, lists and maps) into snapshot directory `Path'.
-spec write_sidecar(Path :: file:filename(), Meta :: map()) -> ok | {error, file:posix() | badarg | terminated | system_limit}.
write_sidecar(Path, Meta) ->
    file:write_file(filename:join(Path, ?SIDECAR), [json(Meta), $\n]).

%% @doc The sidecar of snapshot directory `Path' as a map with binary
%% keys, or `error' when it has none (or an unreadable one).
-spec read_sidecar(Path :: file:filename()) -> {ok, map()} | error.
read_sidecar(Path) ->
    case file:read_file(filename:join(Path, ?SIDECAR)) of
        {ok, Bin} ->
            try json_decode(Bin) of
                M when is_map(M) -> {ok, M};
                _ -> error
            catch
                _:_ -> error
            end;
        {error, _} ->
            error
    end.

%% @doc Deletes snapshot directory `Path' and everything in it.
-spec delete(Path :: file:filename()) -> ok | {error, term()}.
delete(Path) ->
    case file:del_dir_r(Path) of
        ok -> ok;
        {error, enoent} -> ok;
        Error -> Error
    end.

%% @doc Makes directory `Dir' if needed and checks that files can be
%% created in it: `ok' or `{error, Posix}'.
-spec check_writable(Dir :: file:filename()) -> ok | {error, term()}.
check_writable(Dir) ->
    Probe = filename:join(Dir, ".dtrace-recorder-probe"),
    case filelib:ensure_dir(Probe) of
        ok ->
            case file:write_file(Probe, <<"x">>) of
                ok -> _ = file:delete(Probe), ok;
                Error -> Error
            end;
        Error ->
            Error
    end.

%%% A small JSON writer and reader, for the sidecars only (OTP 25 has no
%%% json module).

%% @doc `Term' as JSON text: maps (atom or binary keys), lists, binaries
%% and atoms as strings (`true', `false', `null' as themselves), integers.
-spec json(Term :: json()) -> binary().
json(Term) ->
    iolist_to_binary(json_(Term)).

json_(M) when is_map(M) ->
    ["{", lists:join(",", [[json_string(key(K)), ":", json_(V)]
                           || {K, V} <- lists:sort(maps:to_list(M))]), "}"];
json_(L) when is_list(L) ->
    ["[", lists:join(",", [json_(V) || V <- L]), "]"];
json_(I) when is_integer(I) ->
    integer_to_binary(I);
json_(B) when is_boolean(B); B =:= null ->
    atom_to_binary(B);
json_(A) when is_atom(A) ->
    json_string(atom_to_binary(A));
json_(B) when is_binary(B) ->
    json_string(B).

key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_binary(K) -> K.

json_string(B) ->
    [$", [escape(C) || <<C/utf8>> <= valid_utf8(B)], $"].

valid_utf8(B) ->
    case unicode:characters_to_binary(B) of
        V when is_binary(V) -> V;
        _ -> << <<C/utf8>> || <<C>> <= B >>   % latin-1, as a last resort
    end.

escape($") -> "\\\"";
escape($\\) -> "\\\\";
escape(C) when C < 16#20 -> io_lib:format("\\u~4.16.0b", [C]);
escape(C) -> <<C/utf8>>.

%% @doc Decodes the JSON text `json/1' writes (objects become maps with
%% binary keys, strings binaries, numbers integers). Raises on anything
%% else.
-spec json_decode(Bin :: binary()) -> term().
json_decode(Bin) ->
    {V, Rest} = value(ws(Bin)),
    <<>> = ws(Rest),
    V.

value(<<${, R/binary>>) -> object(ws(R), #{});
value(<<$[, R/binary>>) -> array(ws(R), []);
value(<<$", R/binary>>) -> string(R, <<>>);
value(<<"true", R/binary>>) -> {true, R};
value(<<"false", R/binary>>) -> {false, R};
value(<<"null", R/binary>>) -> {null, R};
value(<<C, _/binary>> = B) when C =:= $-; C >= $0, C =< $9 -> number(B, <<>>).

object(<<$}, R/binary>>, M) -> {M, R};
object(<<$", R/binary>>, M) ->
    {K, R1} = string(R, <<>>),
    <<$:, R2/binary>> = ws(R1),
    {V, R3} = value(ws(R2)),
    case ws(R3) of
        <<$,, R4/binary>> -> object(ws(R4), M#{K => V});
        <<$}, R4/binary>> -> {M#{K => V}, R4}
    end.

array(<<$], R/binary>>, Acc) -> {lists:reverse(Acc), R};
array(B, Acc) ->
    {V, R} = value(B),
    case ws(R) of
        <<$,, R1/binary>> -> array(ws(R1), [V | Acc]);
        <<$], R1/binary>> -> {lists:reverse([V | Acc]), R1}
    end.

string(<<$", R/binary>>, Acc) -> {Acc, R};
string(<<$\\, $u, H:4/binary, R/binary>>, Acc) ->
    C = binary_to_integer(H, 16),
    string(R, <<Acc/binary, C/utf8>>);
string(<<$\\, C, R/binary>>, Acc) ->
    E = case C of $n -> $\n; $t -> $\t; $r -> $\r; $b -> $\b; $f -> $\f; _ -> C end,
    string(R, <<Acc/binary, E>>);
string(<<C, R/binary>>, Acc) -> string(R, <<Acc/binary, C>>).

number(<<C, R/binary>>, Acc) when C =:= $-; C >= $0, C =< $9 -> number(R, <<Acc/binary, C>>);
number(R, Acc) -> {binary_to_integer(Acc), R}.

ws(<<C, R/binary>>) when C =:= $\s; C =:= $\n; C =:= $\t; C =:= $\r -> ws(R);
ws(B) -> B.
