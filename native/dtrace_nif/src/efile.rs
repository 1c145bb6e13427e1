//! The NIFs behind `dtrace_file`: OTP's file-driver probes
//! (`efile_drv__entry`, `__int_entry`, `__int_return`, `__return`).
//!
//! `dtrace_file` asks [`efile_enabled`] first (one NIF call, four semaphore
//! reads) and calls `file` directly when it answers `false`. Otherwise it
//! brackets the `file` call with [`efile_entry`] and [`efile_return`], which
//! take the operation's id and fire those of the four probes a tracer
//! listens on. These are internal functions of module `dtrace`; their
//! argument order is `dtrace_file`'s business.

use std::ffi::c_int;
use std::sync::OnceLock;

use rustler::sys::{ErlNifEnv, ErlNifTerm};
use rustler::types::atom::{false_, ok, true_};
use rustler::{Atom, Encoder, Env, Term};

use crate::args::{PidBuf, StrBuf, int64_or_zero};
use crate::nifs::{call, raw_nif};
use crate::probes::{self, EfileEntry, EfileOp};

raw_nif!("efile_enabled" / 0 => efile_enabled);
raw_nif!("efile_entry" / 10 => efile_entry);
raw_nif!("efile_return" / 6 => efile_return);

/// The platform's errno names as atoms, with their numbers. Atoms are
/// immediates, so a reason is looked up by comparing raw terms.
static ERRNOS: OnceLock<Vec<(ErlNifTerm, i32)>> = OnceLock::new();

/// Library load: makes the errno atoms (about 130, once).
pub fn init(env: Env<'_>) {
    let _ = ERRNOS.get_or_init(|| {
        let mut table = Vec::new();
        crate::errno::for_each(|name, number| {
            if let Ok(atom) = Atom::from_str(env, name) {
                table.push((atom.as_c_arg(), number));
            }
        });
        table
    });
}

/// The errno number of a POSIX reason atom (`enoent` → 2), 0 for any other
/// term (`badarg`, `terminated`, `{no_translation, ...}`).
fn errno_of(reason: Term<'_>) -> i32 {
    let raw = reason.as_c_arg();
    ERRNOS.get().and_then(|t| t.iter().find(|(atom, _)| *atom == raw)).map_or(0, |&(_, n)| n)
}

/// `efile_enabled() -> boolean()`: is a tracer listening on any of the four
/// file probes? Four semaphore reads and nothing else.
unsafe extern "C" fn efile_enabled(_env: *mut ErlNifEnv, _argc: c_int, _argv: *const ErlNifTerm) -> ErlNifTerm {
    if probes::efile_enabled() { true_() } else { false_() }.as_c_arg()
}

/// `efile_entry(ThreadId, Command, S1, S2, I1, I2, I3, I4, UserTag, Device)
/// -> Tag`: starts an operation on scheduler `ThreadId` and returns its
/// per-scheduler counter `Tag` (0..2^31-1), then fires `efile_drv__entry`
/// and `efile_drv__int_entry`, each if enabled. Strings follow the user
/// probes' rules (iolists up to 1024 bytes, else NULL), integers too
/// (64-bit, else 0). `port` is `Device` formatted if it is a pid (a file's
/// I/O server), else the calling process.
unsafe extern "C" fn efile_entry(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    // SAFETY: called by the VM with its own arguments.
    unsafe {
        call(env, argc, argv, |env, args| {
            let op = EfileOp::next(int32_or_zero(args[0]), int32_or_zero(args[1]));
            if probes::efile_entry_enabled() {
                let (mut s1, mut s2, mut user_tag, mut port) =
                    (StrBuf::new(), StrBuf::new(), StrBuf::new(), PidBuf::new());
                let entry = EfileEntry {
                    user_tag: user_tag.iolist_or_null(args[8]),
                    strs: [s1.iolist_or_null(args[2]), s2.iolist_or_null(args[3])],
                    ints: [4, 5, 6, 7].map(|i| int64_or_zero(args[i])),
                    port: port.pid_or_self(env, args[9]),
                };
                probes::fire_efile_entry(op, &entry);
            }
            if probes::efile_int_entry_enabled() {
                probes::fire_efile_int_entry(op);
            }
            op.tag.encode(env)
        })
    }
}

/// `efile_return(ThreadId, Tag, Command, UserTag, Success, Reason) -> ok`:
/// ends the operation `{ThreadId, Tag}`: fires `efile_drv__int_return`
/// and `efile_drv__return`, each if enabled. `Success` is `true` or
/// `false`; `errno` is the number of the POSIX atom `Reason`, else 0.
unsafe extern "C" fn efile_return(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> ErlNifTerm {
    // SAFETY: called by the VM with its own arguments.
    unsafe {
        call(env, argc, argv, |env, args| {
            let op = EfileOp { thread_id: int32_or_zero(args[0]), tag: int32_or_zero(args[1]), command: int32_or_zero(args[2]) };
            if probes::efile_int_return_enabled() {
                probes::fire_efile_int_return(op);
            }
            if probes::efile_return_enabled() {
                let success = args[4].decode::<bool>().unwrap_or(false);
                let errno = if success { 0 } else { errno_of(args[5]) };
                let mut user_tag = StrBuf::new();
                probes::fire_efile_return(op, user_tag.iolist_or_null(args[3]), success, errno);
            }
            ok().to_term(env)
        })
    }
}

/// A 32-bit integer argument (`int` in the probe), else 0.
fn int32_or_zero(term: Term<'_>) -> i32 {
    term.decode::<i32>().unwrap_or(0)
}


