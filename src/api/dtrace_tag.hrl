%%% The user tag at the NIF boundary, shared by dtrace (the p/N and pn/N
%%% routing clauses) and dtrace_tag (which owns the tag). The contract,
%%% the same for every family (user, span, efile; a run-time provider's
%%% probes carry no tag): the tag argument of a NIF is dtrace_nif:user_tag():
%%%   a binary   - this tag;
%%%   undefined  - no tag (NULL; OTP's spelling of an absent tag);
%%%   adopt      - (dtrace_nif:i4s4/9 and user_trace_n/10 only) the caller
%%%                has no tag of its own: if the probe is enabled the NIF
%%%                fires nothing and answers `adopt', and the caller calls
%%%                again with the tag it adopted through spreading, or
%%%                `undefined'.
%%% `undef' is OTP's spelling of an absent probe argument, never a tag.

%% The process dictionary key of the process's own tag (a binary).
-define(TAG_KEY, '$dtrace_tag').

%% The tag argument of the first NIF call of p/N and pn/N: the process's
%% own tag, or `adopt'. Inline (a macro), so that the disabled path makes
%% no call besides the NIF's.
-define(OWN_TAG_OR_ADOPT,
        case get(?TAG_KEY) of
            undefined -> adopt;
            OwnTag__ -> OwnTag__
        end).
