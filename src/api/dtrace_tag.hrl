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

%% Fire user_trace__i4s4 or user_trace__n<Label> (dtrace:p/N, pn/N).
%% Fires with the caller's own tag or, without one, `adopt': the NIF then
%% answers `adopt' when the probe is enabled (and only then: the disabled
%% path is one NIF call) and the probe fires again with the tag the caller
%% adopted through spreading, or `undefined' (the tag contract:
%% dtrace_tag.hrl). A macro rather than a function: expanded in each p/N
%% and pn/N clause, only that clause's variables are kept across the first
%% call (a function would keep all eight arguments, which cost the
%% disabled path ~4 ns).
%% `stack': the probe fired and dtrace_user__stack listens
%% (dtrace_tag:fire_stack/1 fires it and returns true).
-define(FIRE_I4S4(I1, I2, I3, I4, S1, S2, S3, S4),
        case dtrace_nif:i4s4(I1, I2, I3, I4, S1, S2, S3, S4, ?OWN_TAG_OR_ADOPT) of
            adopt ->
                case dtrace_nif:i4s4(I1, I2, I3, I4, S1, S2, S3, S4, dtrace_tag:adopted()) of
                    stack -> dtrace_tag:fire_stack(user_trace__i4s4);
                    Adopted__ -> Adopted__
                end;
            stack -> dtrace_tag:fire_stack(user_trace__i4s4);
            Fired__ -> Fired__
        end).
-define(FIRE_N(Label, I1, I2, I3, I4, S1, S2, S3, S4),
        case dtrace_nif:user_trace_n(Label, I1, I2, I3, I4, S1, S2, S3, S4, ?OWN_TAG_OR_ADOPT) of
            adopt ->
                case dtrace_nif:user_trace_n(Label, I1, I2, I3, I4, S1, S2, S3, S4, dtrace_tag:adopted()) of
                    stack -> dtrace_tag:fire_stack({user_trace__n, Label});
                    Adopted__ -> Adopted__
                end;
            stack -> dtrace_tag:fire_stack({user_trace__n, Label});
            Fired__ -> Fired__
        end).
