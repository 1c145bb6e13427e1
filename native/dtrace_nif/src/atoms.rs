//! Atoms returned by the NIFs. Results are atoms, never strings (OTP's
//! contract: `true | false | error | badarg`).

rustler::atoms! {
    /// `pn` with a label in 951..1023: a valid label with no probe.
    error,
    /// A bad argument, returned (not raised) as OTP's NIF does.
    badarg,
    /// Reason of the exception raised if a NIF panics (never expected).
    nif_panicked,
    /// What `p/N` passes for an absent argument.
    undef,
    /// What `p/N` passes for an absent user tag.
    undefined,
    /// Returned by the NIFs behind `p/N` and `pn/N` when the probe is
    /// enabled and the caller has no tag of its own: the Erlang side looks
    /// for an adopted (spread) tag and calls again.
    adopt,
    /// Returned by the NIFs behind `p/N` and `pn/N` when the probe fired
    /// and `dtrace_user__stack` listens: the Erlang side fires it with the
    /// caller's stack (`user_stack/3`) and returns `true`.
    stack,
    /// Keys of `dtrace:sinks/0`.
    sdt,
    lttng,
    dof,
    /// Outcomes of a span besides `error` (`span__end`'s `outcome`).
    exit,
    throw,
}
