%%% @private
%%% @doc User tags, behind {@link dtrace}'s `put_tag/1', `get_tag/0',
%%% `get_tag_data/0', `spread_tag/1' and `restore_tag/1' (documented there).
%%%
%%% A process's own tag lives in its process dictionary (`?TAG_KEY',
%%% dtrace_tag.hrl). A spread tag travels as the label of the process's
%%% sequential-trace token, `{dtrace_tag, Tag}', which the VM carries with
%%% every message the process sends, to other nodes too (labels may be any
%%% term since OTP 21), and which a receiver takes over from each message it
%%% receives: OTP's dynamic-trace build used the token slot the same way.
%%%
%%% What the probes' NIFs are given as the tag is dtrace_nif:user_tag()
%%% (dtrace_tag.hrl: a binary, `undefined' for none, `adopt' for "the
%%% caller has none of its own"); {@link adopted/0} and {@link get_tag_data/0} give
%%% the first two.
%%% @end
-module(dtrace_tag).

-export([put_tag/1, get_tag/0, get_tag_data/0, spread_tag/1, restore_tag/1, adopted/0, fire_stack/1]).

-include("dtrace_tag.hrl").

-define(SPREAD_KEY, '$dtrace_spread').
-define(SPREADING, 1).
-define(TOKEN_LABEL, dtrace_tag).

-spec put_tag(Data :: undefined | unicode:chardata()) -> binary() | undefined.
put_tag(undefined) ->
    Old = erase(?TAG_KEY),
    spreading() andalso clear_token(),
    Old;
put_tag(Data) ->
    case unicode:characters_to_binary(Data) of
        Tag when is_binary(Tag) ->
            Old = erlang:put(?TAG_KEY, Tag),
            spreading() andalso set_token(Tag),
            Old;
        _ ->
            erlang:error(badarg, [Data])
    end.

-spec get_tag() -> binary() | undefined.
get_tag() ->
    erlang:get(?TAG_KEY).

%% The process's own tag, else the one it adopted, else `undefined': the
%% tag its probes pass (a dtrace_nif:user_tag() without `adopt').
-spec get_tag_data() -> binary() | undefined.
get_tag_data() ->
    case erlang:get(?TAG_KEY) of
        undefined -> adopted();
        Tag -> Tag
    end.

-spec spread_tag(Spread :: boolean()) -> dtrace:tag_state().
spread_tag(true) ->
    Old = tag_state(),
    erlang:put(?SPREAD_KEY, true),
    case erlang:get(?TAG_KEY) of
        undefined -> ok;
        Tag -> set_token(Tag)
    end,
    Old;
spread_tag(false) ->
    Old = tag_state(),
    erase(?SPREAD_KEY),
    clear_token(),
    Old;
spread_tag(Other) ->
    erlang:error(badarg, [Other]).

-spec restore_tag(State :: true | {Flags :: non_neg_integer(), Tag :: binary() | []}) -> true.
restore_tag(true) ->
    true;
restore_tag({Flags, Tag}) when is_integer(Flags), Flags >= 0, (is_binary(Tag) orelse Tag =:= []) ->
    case Tag of
        [] -> erase(?TAG_KEY);
        _ -> erlang:put(?TAG_KEY, Tag)
    end,
    case Flags band ?SPREADING of
        0 ->
            erase(?SPREAD_KEY),
            clear_token();
        _ ->
            erlang:put(?SPREAD_KEY, true),
            case Tag of
                [] -> clear_token();
                _ -> set_token(Tag)
            end
    end,
    true;
restore_tag(Other) ->
    erlang:error(badarg, [Other]).

%% The tag this process adopted through spreading, or `undefined' (no tag).
%% (erlang:seq_trace_info/1 is what seq_trace:get_token/1 calls.)
-spec adopted() -> binary() | undefined.
adopted() ->
    case erlang:seq_trace_info(label) of
        {label, {?TOKEN_LABEL, Tag}} -> Tag;
        _ -> undefined
    end.

tag_state() ->
    Flags = case spreading() of
                true -> ?SPREADING;
                false -> 0
            end,
    case get_tag_data() of
        undefined -> {Flags, []};
        Tag -> {Flags, Tag}
    end.

spreading() ->
    erlang:get(?SPREAD_KEY) =:= true.

set_token(Tag) ->
    _ = seq_trace:set_token(label, {?TOKEN_LABEL, Tag}),
    true.

%% Clears the token if it carries a dtrace tag; leaves an application's
%% own token alone.
clear_token() ->
    case seq_trace:get_token(label) of
        {label, {?TOKEN_LABEL, _}} -> _ = seq_trace:set_token([]), true;
        _ -> false
    end.

%% @private Fires dtrace_user__stack after the user probe Probe fired
%% (its NIF answered `stack': the companion probe listens) with the
%% caller's Erlang stack (process_info/2's current_stacktrace, whose depth
%% the backtrace_depth system flag caps), innermost first, without the
%% frames of dtrace's own modules, as "m:f/a:line <- ..."; the tag as the
%% user probe's (own, else adopted). Returns true: the user probe fired.
-spec fire_stack(Probe :: atom() | {user_trace__n, 0..950}) -> true.
fire_stack(Probe) ->
    {current_stacktrace, Stack} = process_info(self(), current_stacktrace),
    Frames = [frame(F) || {M, _, _, _} = F <- Stack, M =/= dtrace, M =/= dtrace_tag, M =/= 'Elixir.DTrace'],
    Tag = case get(?TAG_KEY) of
              undefined -> adopted();
              Own -> Own
          end,
    Name = case Probe of
               {user_trace__n, Label} -> list_to_atom("user_trace__n" ++ integer_to_list(Label));
               _ -> Probe
           end,
    _ = dtrace_nif:user_stack(Name, cut(lists:join(" <- ", Frames), 1024), Tag),
    true.

frame({M, F, A, Info}) ->
    Arity = if is_list(A) -> length(A); true -> A end,
    Where = case proplists:get_value(line, Info) of
                undefined -> "";
                Line -> [$: | integer_to_list(Line)]
            end,
    [atom_to_list(M), $:, atom_to_list(F), $/, integer_to_list(Arity) | Where].

%% The first Max bytes of an iolist of latin-1 text.
cut(IoList, Max) ->
    Bin = iolist_to_binary(IoList),
    binary:part(Bin, 0, min(byte_size(Bin), Max)).
