//! The NIFs of module `dtrace`: one per probe family.
//!
//! They are registered by hand ([`raw_nif!`]) rather than with
//! `#[rustler::nif]`: rustler's wrapper collects the arguments into a heap
//! `Vec` and decodes them before the body runs, while a disabled probe must
//! return `false` after reading one semaphore and nothing else.
//!
//! Return values follow OTP's `dyntrace` NIF: `false` (not enabled, checked
//! first), `true` (fired), `badarg` / `error` (returned, not raised). The
//! tag-last NIFs behind `p/N` and `pn/N` may also answer `adopt` (enabled,
//! and the caller has no tag of its own: `p/N` calls again with its
//! adopted tag); `dtrace` never returns it. The only exception ever raised
//! is `nif_panicked`, should a bug panic.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rustler::sys::{ErlNifEnv, ErlNifTerm, enif_raise_exception};
use rustler::{Env, Term};

use crate::args::{PidBuf, StrBuf, int64_or_zero, is_undefined, is_undefined_raw};
use crate::atoms;
use rustler::types::atom::{false_, true_};
use crate::probes::{self, I4s4, N_PROBES};

/// Labels `pn` accepts without `badarg` (OTP reserves 0..1023, declares 951).
const MAX_LABEL: i32 = 1023;

/// The C signature of a NIF.
pub(crate) type RawNif = unsafe extern "C" fn(*mut ErlNifEnv, c_int, *const ErlNifTerm) -> ErlNifTerm;

/// Registers `$func` as `dtrace:$name/$arity` in the table `rustler::init!` reads.
macro_rules! raw_nif {
    ($name:literal / $arity:literal => $func:ident) => {
        inventory::submit!(rustler::Nif {
            name: concat!($name, "\0").as_ptr() as *const ::std::ffi::c_char,
            arity: $arity,
            flags: 0,
            raw_func: $func as $crate::nifs::RawNif,
        });
    };
}
pub(crate) use raw_nif;

raw_nif!("available" / 0 => available);
raw_nif!("is_enabled" / 0 => is_enabled_i4s4);
raw_nif!("is_enabled" / 1 => is_enabled_n);
raw_nif!("user_trace_s1" / 1 => user_trace_s1);
raw_nif!("user_trace_i4s4" / 9 => user_trace_i4s4);
raw_nif!("i4s4" / 9 => i4s4);
raw_nif!("user_trace_n" / 10 => user_trace_n);

/// Library load: creates the atoms once, so no NIF call allocates them,
/// and records the immediates argument conversion compares with.
pub fn load(env: Env, _info: Term) -> bool {
    let _ = (atoms::error(), atoms::badarg(), atoms::nif_panicked(), atoms::adopt());
    crate::args::init(env);
    crate::efile::init(env);
    true
}

/// Runs `body` with the call's env and arguments, turning a panic into the
/// exception `error:nif_panicked` instead of letting it unwind into the VM.
///
/// # Safety
/// `env`, `argc` and `argv` must be the ones the VM passed to a NIF.
#[inline(always)]
pub(crate) unsafe fn call(
    env: *mut ErlNifEnv,
    argc: c_int,
    argv: *const ErlNifTerm,
    body: impl for<'a> FnOnce(Env<'a>, &[Term<'a>]) -> Term<'a>,
) -> ErlNifTerm {
    let scope = ();
    // SAFETY: the VM guarantees `env` is valid for this call and `argv`
    // holds `argc` (the registered arity, at most 10) valid terms of it.
    let env_ = unsafe { Env::new(&scope, env) };
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut terms = arrayvec::ArrayVec::<Term, 10>::new();
        for i in 0..argc as usize {
            // SAFETY: as above; `i < argc`.
            terms.push(unsafe { Term::new(env_, *argv.add(i)) });
        }
        body(env_, &terms).as_c_arg()
    }));
    match result {
        Ok(term) => term,
        // SAFETY: raising an atom from a NIF with its own env is always valid.
        Err(_) => unsafe { enif_raise_exception(env, atoms::nif_panicked().as_c_arg()) },
    }
}

/// `available() -> boolean()`: `true` where this build has SDT probes.
unsafe extern "C" fn available(_env: *mut ErlNifEnv, _argc: c_int, _argv: *const ErlNifTerm) -> ErlNifTerm {
    if probes::AVAILABLE { true_() } else { false_() }.as_c_arg()
}

/// `is_enabled() -> boolean()`: is a tracer listening on `user_trace__i4s4`
/// (the probe of `p/N`)? One semaphore read.
unsafe extern "C" fn is_enabled_i4s4(_env: *mut ErlNifEnv, _argc: c_int, _argv: *const ErlNifTerm) -> ErlNifTerm {
    if probes::i4s4_enabled() { true_() } else { false_() }.as_c_arg()
}

/// `is_enabled(Label) -> boolean()`: is a tracer listening on
/// `user_trace__n<Label>`? `false` for anything that names no probe.
unsafe extern "C" fn is_enabled_n(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    // SAFETY: called by the VM with its own arguments.
    unsafe {
        call(env, argc, argv, |env, args| {
            let enabled = match args[0].decode::<i32>() {
                Ok(label @ 0..) => probes::n_enabled(label as usize),
                _ => false,
            };
            if enabled { true_() } else { false_() }.to_term(env)
        })
    }
}

/// `user_trace_s1(IoList) -> true | false | badarg`. When enabled, an
/// argument that is not an iolist of at most 1024 bytes returns `badarg`
/// and does not fire.
unsafe extern "C" fn user_trace_s1(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    if !probes::s1_enabled() {
        return false_().as_c_arg();
    }
    // SAFETY: called by the VM with its own arguments.
    unsafe {
        call(env, argc, argv, |env, args| {
            let mut message = StrBuf::new();
            let message = message.iolist_or_null(args[0]);
            if message.is_null() {
                return atoms::badarg().to_term(env);
            }
            probes::fire_s1(message);
            true_().to_term(env)
        })
    }
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
    /// (`args[4..8]`) as OTP does, and returns the probe arguments, which
    /// borrow `self`.
    fn convert(&mut self, env: Env<'_>, user_tag: Term<'_>, args: &[Term<'_>]) -> I4s4 {
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
unsafe extern "C" fn user_trace_i4s4(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    // SAFETY: called by the VM with its own arguments.
    unsafe { i4s4_with_tag_at(env, argc, argv, 0, 1, false) }
}

/// `i4s4(I1, I2, I3, I4, S1, S2, S3, S4, UserTag) -> true | false | adopt`:
/// the same with the tag last, as `p/N` calls it (no argument rotation).
/// `UserTag` = `undefined` means the caller has no tag of its own: when the
/// probe is enabled this returns `adopt` without firing, and `p/N` calls
/// again with the tag the caller adopted, if any (tag spreading).
unsafe extern "C" fn i4s4(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    // SAFETY: called by the VM with its own arguments.
    unsafe { i4s4_with_tag_at(env, argc, argv, 8, 0, true) }
}

/// Fires `user_trace__i4s4` with the user tag at `args[tag]` and I1..I4,
/// S1..S4 at `args[first..first + 8]`; with `adopt`, answers `adopt` for
/// an `undefined` tag instead (see [`i4s4`]).
///
/// # Safety
/// As [`call`].
#[inline(always)]
unsafe fn i4s4_with_tag_at(
    env: *mut ErlNifEnv,
    argc: c_int,
    argv: *const ErlNifTerm,
    tag: usize,
    first: usize,
    adopt: bool,
) -> ErlNifTerm {
    if !probes::i4s4_enabled() {
        return false_().as_c_arg();
    }
    // SAFETY: as the caller's: `argv` holds more than `tag` terms.
    unsafe {
        if adopt && is_undefined_raw(*argv.add(tag)) {
            // The caller has no tag of its own: it asks again with the
            // tag it adopted, if any.
            return atoms::adopt().as_c_arg();
        }
        call(env, argc, argv, |env, args| {
            let mut bufs = I4s4Bufs::default();
            probes::fire_i4s4(&bufs.convert(env, args[tag], &args[first..]));
            true_().to_term(env)
        })
    }
}

/// `user_trace_n(Label, I1..I4, S1..S4, UserTag) -> true | false | error | badarg | adopt`
/// (tag last, as `pn/N` calls it; `adopt` as for [`i4s4`]).
/// A label that is not an integer in 0..1023 returns `badarg`, one in
/// 951..1023 returns `error`, both before the enabled check (OTP's order).
unsafe extern "C" fn user_trace_n(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    // SAFETY: called by the VM with its own arguments.
    unsafe {
        call(env, argc, argv, |env, args| {
            #[cfg(feature = "test-panic")]
            if matches!(args[0].decode::<i32>(), Ok(-1_000_000)) {
                panic!("dtrace_nif built with feature test-panic: pn(-1000000) panics");
            }
            let label = match args[0].decode::<i32>() {
                Ok(label @ 0..=MAX_LABEL) => label as usize,
                _ => return atoms::badarg().to_term(env),
            };
            if label >= N_PROBES {
                return atoms::error().to_term(env);
            }
            if !probes::n_enabled(label) {
                return false_().to_term(env);
            }
            if is_undefined(args[9]) {
                return atoms::adopt().to_term(env);
            }
            let mut bufs = I4s4Bufs::default();
            probes::fire_n(label, &bufs.convert(env, args[9], &args[1..]));
            true_().to_term(env)
        })
    }
}
