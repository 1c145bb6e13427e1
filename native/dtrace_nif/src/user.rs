//! The user probes' NIFs (module `dtrace`): `user_trace__s1`,
//! `user_trace__i4s4` and the numbered `user_trace__n<label>`.
//!
//! Return values follow OTP's `dyntrace` NIF: `false` (not enabled, checked
//! first), `true` (fired), `badarg` / `error` (returned, not raised). The
//! tag-last NIFs behind `p/N` and `pn/N` may also answer `adopt` (enabled,
//! and the caller has no tag of its own: `p/N` calls again with its
//! adopted tag); `dtrace` never returns it. The only exception ever raised
//! is `nif_panicked`, should a bug panic.

use rustler::sys::ErlNifTerm;
use rustler::types::atom::{false_, true_};
use rustler::{Env, Term};

use crate::args::{PidBuf, StrBuf, int64_or_zero, is_undefined, is_undefined_raw};
use crate::atoms;
use crate::nif::{NifCall, raw_nif};
use crate::probes::{self, Str, user_trace__i4s4, user_trace__n, user_trace__s1};

raw_nif!("available" / 0 => available);
raw_nif!("sinks" / 0 => sinks);
raw_nif!("is_enabled" / 0 => is_enabled_i4s4);
raw_nif!("is_enabled" / 1 => is_enabled_n);
raw_nif!("user_trace_s1" / 1 => user_trace_s1);
raw_nif!("user_trace_i4s4" / 9 => user_trace_i4s4);
raw_nif!("i4s4" / 9 => i4s4);
raw_nif!("user_trace_n" / 10 => user_trace_n);

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

/// `sinks() -> #{sdt => boolean(), lttng => true | {false, Why}}`: which
/// sinks this library can fire in: SDT notes (this build has them), and
/// LTTng-UST (the provider package and liblttng-ust loaded; otherwise why
/// not, as a binary).
fn sinks(call: NifCall) -> ErlNifTerm {
    call.run_allocating(|env, _args| {
        use rustler::Encoder;
        let lttng = match crate::lttng::status() {
            Ok(()) => true_().encode(env),
            Err(why) => (false_(), why).encode(env),
        };
        rustler::types::map::map_new(env)
            .map_put(atoms::sdt().encode(env), boolean_term(env, probes::AVAILABLE))
            .and_then(|m| m.map_put(atoms::lttng().encode(env), lttng))
            .unwrap_or_else(|_| atoms::error().encode(env))
    })
}

fn boolean_term(env: Env<'_>, b: bool) -> Term<'_> {
    if b { true_() } else { false_() }.to_term(env)
}

/// `is_enabled() -> boolean()`: is a tracer listening on `user_trace__i4s4`
/// (the probe of `p/N`)? One semaphore read.
fn is_enabled_i4s4(_call: NifCall) -> ErlNifTerm {
    boolean(user_trace__i4s4::any_enabled())
}

/// `is_enabled(Label) -> boolean()`: is a tracer listening on
/// `user_trace__n<Label>`? `false` for anything that names no probe.
fn is_enabled_n(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| {
        let enabled = match args[0].decode::<i32>() {
            Ok(label @ 0..) if label as usize <= user_trace__n::LAST => user_trace__n::any_enabled(label as usize),
            _ => false,
        };
        if enabled { true_() } else { false_() }.to_term(env)
    })
}

/// `user_trace_s1(IoList) -> true | false | badarg`. When enabled, an
/// argument that is not an iolist of at most 1024 bytes returns `badarg`
/// and does not fire.
fn user_trace_s1(call: NifCall) -> ErlNifTerm {
    if !user_trace__s1::any_enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let mut message = StrBuf::new();
        let message = message.iolist_or_null(args[0]);
        if message.is_null() {
            return atoms::badarg().to_term(env);
        }
        user_trace__s1::emit(message);
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

/// Stack buffers for the ten i4s4 arguments, filled only when enabled.
#[derive(Default)]
struct I4s4Bufs {
    pid: PidBuf,
    user_tag: StrBuf,
    strs: [StrBuf; 4],
}

impl I4s4Bufs {
    /// Converts the user tag, `I1..I4` (`args[0..4]`) and `S1..S4`
    /// (`args[4..8]`) as OTP does, into the buffers.
    fn convert(&mut self, env: Env<'_>, user_tag: Term<'_>, args: &[Term<'_>]) -> I4s4<'_> {
        let [s1, s2, s3, s4] = &mut self.strs;
        I4s4 {
            pid: self.pid.self_pid(env),
            user_tag: self.user_tag.iolist_or_null(user_tag),
            ints: [0, 1, 2, 3].map(|i| int64_or_zero(args[i])),
            strs: [
                s1.iolist_or_null(args[4]),
                s2.iolist_or_null(args[5]),
                s3.iolist_or_null(args[6]),
                s4.iolist_or_null(args[7]),
            ],
        }
    }
}

/// `user_trace_i4s4(UserTag, I1, I2, I3, I4, S1, S2, S3, S4) -> true | false`:
/// OTP's raw form, tag first.
fn user_trace_i4s4(call: NifCall) -> ErlNifTerm {
    i4s4_with_tag_at(call, 0, 1, false)
}

/// `i4s4(I1, I2, I3, I4, S1, S2, S3, S4, UserTag) -> true | false | adopt`:
/// the same with the tag last, as `p/N` calls it (no argument rotation).
/// `UserTag` = `undefined` means the caller has no tag of its own: when the
/// probe is enabled this returns `adopt` without firing, and `p/N` calls
/// again with the tag the caller adopted, if any (tag spreading).
fn i4s4(call: NifCall) -> ErlNifTerm {
    i4s4_with_tag_at(call, 8, 0, true)
}

/// Fires `user_trace__i4s4` with the user tag at argument `tag` and I1..I4,
/// S1..S4 at `first..first + 8`; with `adopt`, answers `adopt` for an
/// `undefined` tag instead (see [`i4s4`]).
#[inline(always)]
fn i4s4_with_tag_at(call: NifCall, tag: usize, first: usize, adopt: bool) -> ErlNifTerm {
    if !user_trace__i4s4::any_enabled() {
        return false_().as_c_arg();
    }
    if adopt && call.raw_arg(tag).is_some_and(is_undefined_raw) {
        // The caller has no tag of its own: it asks again with the tag it
        // adopted, if any.
        return atoms::adopt().as_c_arg();
    }
    call.run(|env, args| {
        let mut bufs = I4s4Bufs::default();
        let a = bufs.convert(env, args[tag], &args[first..]);
        let [i1, i2, i3, i4] = a.ints;
        let [s1, s2, s3, s4] = a.strs;
        user_trace__i4s4::emit(a.pid, a.user_tag, i1, i2, i3, i4, s1, s2, s3, s4);
        true_().to_term(env)
    })
}

/// `user_trace_n(Label, I1..I4, S1..S4, UserTag) -> true | false | error | badarg | adopt`
/// (tag last, as `pn/N` calls it; `adopt` as for [`i4s4`]).
/// A label that is not an integer in 0..1023 returns `badarg`, one in
/// 951..1023 returns `error`, both before the enabled check (OTP's order).
fn user_trace_n(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| {
        #[cfg(feature = "test-hooks")]
        if let Some(answer) = test_hook(env, args[0]) {
            return answer;
        }
        let label = match args[0].decode::<i32>() {
            Ok(label @ 0..=MAX_LABEL) => label as usize,
            _ => return atoms::badarg().to_term(env),
        };
        if label > user_trace__n::LAST {
            return atoms::error().to_term(env);
        }
        if !user_trace__n::any_enabled(label) {
            return false_().to_term(env);
        }
        if is_undefined(args[9]) {
            return atoms::adopt().to_term(env);
        }
        let mut bufs = I4s4Bufs::default();
        let a = bufs.convert(env, args[9], &args[1..]);
        let [i1, i2, i3, i4] = a.ints;
        let [s1, s2, s3, s4] = a.strs;
        user_trace__n::emit(label, a.pid, a.user_tag, i1, i2, i3, i4, s1, s2, s3, s4);
        true_().to_term(env)
    })
}

/// The test build's hooks (see `nif::test_hooks`): `pn(-1000000)` panics,
/// `pn(-2000000)` returns the heap allocations made inside NIF bodies.
#[cfg(feature = "test-hooks")]
fn test_hook<'a>(env: Env<'a>, label: Term<'a>) -> Option<Term<'a>> {
    use rustler::Encoder;
    match label.decode::<i32>() {
        Ok(-1_000_000) => panic!("dtrace_nif built with feature test-hooks: pn(-1000000) panics"),
        Ok(-2_000_000) => {
            Some(crate::nif::test_hooks::IN_NIF_BODIES.load(std::sync::atomic::Ordering::Relaxed).encode(env))
        }
        _ => None,
    }
}
