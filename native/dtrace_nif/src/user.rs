//! The user probes' NIFs (module `dtrace_nif`, behind `dtrace`):
//! `user_trace__s1`, `user_trace__i4s4` and the numbered
//! `user_trace__n<label>`.
//!
//! Return values follow OTP's `dyntrace` NIF: `false` (not enabled, checked
//! first), `true` (fired), `badarg` / `error` (returned, not raised). The
//! tag-last NIFs behind `p/N` and `pn/N` may also answer `adopt` (enabled,
//! and the caller passed `adopt`, having no tag of its own: `p/N` calls
//! again with its adopted tag or `undefined`); `dtrace` never returns it. The only exception ever raised
//! is `nif_panicked`, should a bug panic.

use rustler::sys::ErlNifTerm;
use rustler::types::atom::{false_, true_};
use rustler::{Env, Term};

use crate::args::{StrBuf, int64_or_zero, is_adopt_raw};
use crate::atoms;
use crate::entry::raw_nif;
use crate::nif::{NifArgs, NifCall, NoArgs, nif_args};
use crate::probes::{self, Str, user_trace__i4s4, user_trace__n, user_trace__s1};
use crate::text::TextBuf;

raw_nif!("available", NoArgs => available);
raw_nif!("is_enabled", NoArgs => is_enabled_i4s4);
raw_nif!("is_enabled", LabelArgs => is_enabled_n);
raw_nif!("user_trace_s1", S1Args => user_trace_s1);
raw_nif!("user_trace_i4s4", TagFirstArgs => user_trace_i4s4);
raw_nif!("i4s4", TagLastArgs => i4s4);
raw_nif!("user_trace_n", NumberedArgs => user_trace_n);

nif_args!(
    /// `is_enabled(Label)`.
    LabelArgs { label }
);
nif_args!(
    /// `user_trace_s1(Message)`.
    S1Args { message }
);
nif_args!(
    /// `user_trace_i4s4(UserTag, I1..I4, S1..S4)`: OTP's order.
    TagFirstArgs { user_tag, i1, i2, i3, i4, s1, s2, s3, s4 }
);
nif_args!(
    /// `i4s4(I1..I4, S1..S4, UserTag)`: the tag last, as `p/N` calls it
    /// (the routing clauses then pass their arguments in the registers they
    /// arrived in; a leading tag would make every call rotate them).
    TagLastArgs { i1, i2, i3, i4, s1, s2, s3, s4, user_tag }
);
nif_args!(
    /// `user_trace_n(Label, I1..I4, S1..S4, UserTag)`, as `pn/N` calls it.
    NumberedArgs { label, i1, i2, i3, i4, s1, s2, s3, s4, user_tag }
);

/// Labels `pn` accepts without `badarg` (OTP reserves 0..1023, declares 951).
const MAX_LABEL: i32 = 1023;

/// `true`/`false` as a raw term.
#[inline(always)]
fn boolean(b: bool) -> ErlNifTerm {
    if b { true_() } else { false_() }.as_c_arg()
}

/// `available() -> boolean()`: `true` where probes can fire: this build
/// has SDT probes, or the LTTng sink loaded.
fn available(_call: NifCall) -> ErlNifTerm {
    boolean(probes::AVAILABLE || crate::lttng::status().is_ok())
}

/// `sinks() -> #{sdt => boolean(), lttng => true | {false, Why}, dof =>
/// true | {false, Why}}`: which sinks this library can fire in: SDT notes
/// (this build has them), LTTng-UST (the provider package and
/// liblttng-ust loaded; otherwise why not, as a binary), and DTrace's own
/// registration (the DOF handed to the helper device, and the kernel lets
/// DTrace's is-enabled probes work; otherwise why not).
#[rustler::nif]
fn sinks(env: Env<'_>) -> Term<'_> {
    use rustler::Encoder;
    let lttng = match crate::lttng::status() {
        Ok(()) => true_().encode(env),
        Err(why) => (false_(), why).encode(env),
    };
    let dof = match crate::dof::status() {
        Ok(()) => true_().encode(env),
        Err(why) => (false_(), why).encode(env),
    };
    rustler::types::map::map_new(env)
        .map_put(atoms::sdt().encode(env), probes::AVAILABLE.encode(env))
        .and_then(|m| m.map_put(atoms::lttng().encode(env), lttng))
        .and_then(|m| m.map_put(atoms::dof().encode(env), dof))
        .unwrap_or_else(|_| atoms::error().encode(env))
}

/// `is_enabled() -> boolean()`: is a tracer listening on `user_trace__i4s4`
/// (the probe of `p/N`), in any sink? One load per sink.
fn is_enabled_i4s4(_call: NifCall) -> ErlNifTerm {
    boolean(user_trace__i4s4::enabled())
}

/// `is_enabled(Label) -> boolean()`: is a tracer listening on
/// `user_trace__n<Label>`? `false` for anything that names no probe.
fn is_enabled_n(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| {
        let Some(a) = LabelArgs::from_slice(args) else { return false_().to_term(env) };
        let enabled = match a.label.decode::<i32>() {
            Ok(label @ 0..) if label as usize <= user_trace__n::LAST => user_trace__n::enabled(label as usize),
            _ => false,
        };
        if enabled { true_() } else { false_() }.to_term(env)
    })
}

/// `user_trace_s1(IoList) -> true | false | badarg`. When enabled, an
/// argument that is not an iolist of at most 1024 bytes returns `badarg`
/// and does not fire.
fn user_trace_s1(call: NifCall) -> ErlNifTerm {
    if !user_trace__s1::enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let Some(a) = S1Args::from_slice(args) else { return atoms::badarg().to_term(env) };
        let mut message = StrBuf::new();
        let message = message.iolist_or_null(a.message);
        if message.is_null() {
            return atoms::badarg().to_term(env);
        }
        user_trace__s1::fire(message);
        true_().to_term(env)
    })
}

/// The ten arguments of `user_trace__i4s4` and of the numbered probes,
/// borrowed from the stack buffers they were converted into.
#[derive(Clone, Copy, Debug)]
struct I4s4<'a> {
    /// The calling process, formatted like `pid_to_list/1`: `<0.84.0>`.
    pid: Str<'a>,
    /// The caller's user tag, or NULL.
    user_tag: Str<'a>,
    /// i1..i4; 0 where absent.
    ints: [i64; 4],
    /// s1..s4; NULL where absent.
    strs: [Str<'a>; 4],
}

/// The arguments of `user_trace__i4s4` and `user_trace__n<label>` as
/// terms, whatever NIF carried them.
struct I4s4Terms<'a> {
    user_tag: Term<'a>,
    ints: [Term<'a>; 4],
    strs: [Term<'a>; 4],
}

/// Stack buffers for the ten i4s4 arguments, filled only when enabled.
#[derive(Default)]
struct I4s4Bufs {
    pid: TextBuf,
    user_tag: StrBuf,
    strs: [StrBuf; 4],
}

impl I4s4Bufs {
    /// Converts the arguments as OTP does, into the buffers.
    fn convert(&mut self, env: Env<'_>, t: &I4s4Terms<'_>) -> I4s4<'_> {
        let [s1, s2, s3, s4] = &mut self.strs;
        I4s4 {
            pid: self.pid.self_pid(env),
            user_tag: self.user_tag.iolist_or_null(t.user_tag),
            ints: t.ints.map(int64_or_zero),
            strs: [
                s1.iolist_or_null(t.strs[0]),
                s2.iolist_or_null(t.strs[1]),
                s3.iolist_or_null(t.strs[2]),
                s4.iolist_or_null(t.strs[3]),
            ],
        }
    }
}

/// `user_trace_i4s4(UserTag, I1, I2, I3, I4, S1, S2, S3, S4) -> true | false`:
/// OTP's raw form, tag first.
fn user_trace_i4s4(call: NifCall) -> ErlNifTerm {
    if !user_trace__i4s4::enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| match TagFirstArgs::from_slice(args) {
        Some(a) => fire_i4s4(
            env,
            I4s4Terms { user_tag: a.user_tag, ints: [a.i1, a.i2, a.i3, a.i4], strs: [a.s1, a.s2, a.s3, a.s4] },
            false,
        ),
        None => false_().to_term(env),
    })
}

/// `i4s4(I1, I2, I3, I4, S1, S2, S3, S4, UserTag) -> true | false | adopt | stack`:
/// the same with the tag last, as `p/N` calls it. `UserTag` = `adopt`
/// means the caller has no tag of its own: when the probe is enabled this
/// returns `adopt` without firing, and `p/N` calls again with the tag the
/// caller adopted (tag spreading), or `undefined` (no tag: NULL).
fn i4s4(call: NifCall) -> ErlNifTerm {
    if !user_trace__i4s4::enabled() {
        return false_().as_c_arg();
    }
    if call.raw::<TagLastArgs<ErlNifTerm>>().is_some_and(|a| is_adopt_raw(a.user_tag)) {
        // The caller has no tag of its own: it asks again with the tag it
        // adopted, if any.
        return atoms::adopt().as_c_arg();
    }
    call.run(|env, args| match TagLastArgs::from_slice(args) {
        Some(a) => fire_i4s4(
            env,
            I4s4Terms { user_tag: a.user_tag, ints: [a.i1, a.i2, a.i3, a.i4], strs: [a.s1, a.s2, a.s3, a.s4] },
            true,
        ),
        None => false_().to_term(env),
    })
}

/// Converts and fires `user_trace__i4s4`; `true`, or (when `stack_ok`,
/// the caller being `p/N`) what [`fired`] says.
fn fire_i4s4<'a>(env: Env<'a>, terms: I4s4Terms<'a>, stack_ok: bool) -> Term<'a> {
    let mut bufs = I4s4Bufs::default();
    let a = bufs.convert(env, &terms);
    let [i1, i2, i3, i4] = a.ints;
    let [s1, s2, s3, s4] = a.strs;
    user_trace__i4s4::fire(a.pid, a.user_tag, i1, i2, i3, i4, s1, s2, s3, s4);
    if stack_ok { fired(env) } else { true_().to_term(env) }
}

/// What a user probe that fired returns: `true`, or `stack` while
/// `dtrace_user__stack` listens (the caller then fires it, `user_stack/3`).
/// One semaphore read, only after a probe fired.
fn fired(env: Env<'_>) -> Term<'_> {
    if probes::dtrace_user__stack::enabled() { atoms::stack().to_term(env) } else { true_().to_term(env) }
}

/// `user_stack(Probe, Stack, UserTag) -> boolean()`: fires
/// `dtrace_user__stack` with the calling process, `UserTag` (a binary, or
/// `undefined`: NULL), the probe's name (an atom) and the stack's text (an
/// iolist: NULL if it is not one of at most 1024 bytes); `false` when
/// nobody listens.
#[rustler::nif]
fn user_stack<'a>(env: Env<'a>, probe: Term<'a>, stack: Term<'a>, user_tag: Term<'a>) -> bool {
    if !probes::dtrace_user__stack::enabled() {
        return false;
    }
    let (mut pid, mut name) = (TextBuf::new(), TextBuf::new());
    let (mut tag, mut text) = (StrBuf::new(), StrBuf::new());
    let probe = if probe.get_type() == rustler::TermType::Atom { name.atom(env, probe) } else { name.literal("") };
    probes::dtrace_user__stack::fire(
        pid.self_pid(env),
        tag.iolist_or_null(user_tag),
        probe,
        text.iolist_or_null(stack),
    );
    true
}

/// `user_trace_n(Label, I1..I4, S1..S4, UserTag) -> true | false | error | badarg | adopt | stack`
/// (tag last, as `pn/N` calls it; `adopt` and `stack` as for [`i4s4`]).
/// A label that is not an integer in 0..1023 returns `badarg`, one in
/// 951..1023 returns `error`, both before the enabled check (OTP's order).
fn user_trace_n(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| {
        let Some(a) = NumberedArgs::from_slice(args) else { return atoms::badarg().to_term(env) };
        let label = match a.label.decode::<i32>() {
            Ok(label @ 0..=MAX_LABEL) => label as usize,
            _ => return atoms::badarg().to_term(env),
        };
        if label > user_trace__n::LAST {
            return atoms::error().to_term(env);
        }
        if !user_trace__n::enabled(label) {
            return false_().to_term(env);
        }
        if is_adopt_raw(a.user_tag.as_c_arg()) {
            return atoms::adopt().to_term(env);
        }
        let mut bufs = I4s4Bufs::default();
        let terms = I4s4Terms { user_tag: a.user_tag, ints: [a.i1, a.i2, a.i3, a.i4], strs: [a.s1, a.s2, a.s3, a.s4] };
        let c = bufs.convert(env, &terms);
        let [i1, i2, i3, i4] = c.ints;
        let [s1, s2, s3, s4] = c.strs;
        user_trace__n::fire(label, c.pid, c.user_tag, i1, i2, i3, i4, s1, s2, s3, s4);
        fired(env)
    })
}
