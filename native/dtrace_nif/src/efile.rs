//! The NIFs behind `dtrace_file`: OTP's file-driver probes
//! (`efile_drv__entry`, `__int_entry`, `__int_return`, `__return`).
//!
//! `dtrace_file` asks `efile_enabled/0` first (one NIF call, a load per
//! probe and sink) and calls `file` directly when it answers `false`. Otherwise it
//! brackets the `file` call with `efile_entry/10` and `efile_return/6`,
//! which take the operation's id ([`EfileOp`]) and fire those of the four
//! probes a tracer listens on. These are internal functions of module
//! `dtrace_nif`; their argument order is `dtrace_file`'s business.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Names one file operation in the four `efile_drv__*` probes, as OTP's
/// driver did: the scheduler that started it and a per-scheduler counter
/// (the probes' `tag` argument, OTP's name for it; called `op_id` here, so
/// that "tag" means the user tag only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfileOp {
    /// The scheduler number (1..) the operation started on.
    pub thread_id: i32,
    /// The scheduler's operation counter, 1.. (wraps to 0 after `i32::MAX`).
    pub op_id: i32,
    /// OTP's efile command number (`OPEN` = 1, `READ` = 2, ...).
    pub command: i32,
}

/// The most schedulers a VM has (`+S 1024`); one operation counter each.
const MAX_SCHEDULERS: usize = 1024;

/// Per-scheduler operation counters; index 0 takes any out-of-range id.
static OP_COUNTERS: [AtomicU32; MAX_SCHEDULERS + 1] = [const { AtomicU32::new(0) }; MAX_SCHEDULERS + 1];

impl EfileOp {
    /// A new operation started on scheduler `thread_id` (an id outside
    /// 1..=1024 counts on a shared counter), with `command`. Counters are
    /// shared by all processes on a scheduler; any process may call this,
    /// and op ids stay unique while fewer than 2^31 operations of one
    /// scheduler are in flight.
    pub fn next(thread_id: i32, command: i32) -> Self {
        let slot = usize::try_from(thread_id).ok().filter(|&t| t <= MAX_SCHEDULERS).unwrap_or(0);
        let n = OP_COUNTERS[slot].fetch_add(1, Relaxed).wrapping_add(1);
        Self { thread_id, op_id: (n & 0x7fff_ffff) as i32, command }
    }
}

/// The NIFs. Left out of unit-test builds, which never
/// call into the VM (its `enif_*` functions exist only once the VM loads
/// the library).
#[cfg(not(test))]
pub(crate) mod nifs {
    use std::sync::OnceLock;

    use rustler::sys::ErlNifTerm;
    use rustler::types::atom::{false_, ok, true_};
    use rustler::{Atom, Encoder, Env, Term};

    use super::EfileOp;
    use crate::args::{StrBuf, int64_or_zero};
    use crate::entry::raw_nif;
    use crate::nif::{NifArgs, NifCall, NoArgs, nif_args};
    use crate::probes::{efile_drv__entry, efile_drv__int_entry, efile_drv__int_return, efile_drv__return};
    use crate::text::TextBuf;

    raw_nif!("efile_enabled", NoArgs => efile_enabled);
    raw_nif!("efile_entry", EntryArgs => efile_entry);
    raw_nif!("efile_return", ReturnArgs => efile_return);

    nif_args!(
        /// `efile_entry(ThreadId, Command, S1, S2, I1, I2, I3, I4, UserTag, Device)`.
        EntryArgs { thread_id, command, s1, s2, i1, i2, i3, i4, user_tag, device }
    );
    nif_args!(
        /// `efile_return(ThreadId, OpId, Command, UserTag, Success, Reason)`.
        ReturnArgs { thread_id, op_id, command, user_tag, success, reason }
    );

    /// The platform's errno names as atoms, with their numbers. Atoms are
    /// immediates, so a reason is looked up by comparing raw terms.
    static ERRNOS: OnceLock<Vec<(ErlNifTerm, i32)>> = OnceLock::new();

    inventory::submit!(crate::load::LoadStep { order: crate::load::order::EFILE, run: load });

    /// The family's load step: makes the errno atoms (about 130, once).
    fn load(env: Env<'_>) -> bool {
        let _ = ERRNOS.get_or_init(|| {
            let mut table = Vec::new();
            crate::errno::for_each(|name, number| {
                if let Ok(atom) = Atom::from_str(env, name) {
                    table.push((atom.as_c_arg(), number));
                }
            });
            table
        });
        true
    }

    /// The errno number of a POSIX reason atom (`enoent` → 2), 0 for any other
    /// term (`badarg`, `terminated`, `{no_translation, ...}`).
    fn errno_of(reason: Term<'_>) -> i32 {
        let raw = reason.as_c_arg();
        ERRNOS.get().and_then(|t| t.iter().find(|(atom, _)| *atom == raw)).map_or(0, |&(_, n)| n)
    }

    /// Is a tracer listening on any of the four file probes, in any sink?
    /// (A file operation then takes an id and fires those that are.)
    #[inline(always)]
    fn any_enabled() -> bool {
        efile_drv__entry::enabled()
            | efile_drv__int_entry::enabled()
            | efile_drv__int_return::enabled()
            | efile_drv__return::enabled()
    }

    /// `efile_enabled() -> boolean()`: is a tracer listening on any of the four
    /// file probes? A load per probe and sink, nothing else.
    fn efile_enabled(_call: NifCall) -> ErlNifTerm {
        if any_enabled() { true_() } else { false_() }.as_c_arg()
    }

    /// `efile_entry(ThreadId, Command, S1, S2, I1, I2, I3, I4, UserTag, Device)
    /// -> OpId`: starts an operation on scheduler `ThreadId` and returns its
    /// per-scheduler counter `OpId` (0..2^31-1, the probes' `tag`), then fires
    /// `efile_drv__entry` and `efile_drv__int_entry`, each if enabled. Strings
    /// follow the user probes' rules (iolists up to 1024 bytes, else NULL),
    /// integers too (64-bit, else 0). `port` is `Device` formatted if it is a
    /// pid (a file's I/O server), else the calling process.
    fn efile_entry(call: NifCall) -> ErlNifTerm {
        call.run(|env, args| {
            let Some(a) = EntryArgs::from_slice(args) else { return 0.encode(env) };
            let op = EfileOp::next(int32_or_zero(a.thread_id), int32_or_zero(a.command));
            if efile_drv__entry::enabled() {
                let (mut s1, mut s2, mut user_tag, mut port) =
                    (StrBuf::new(), StrBuf::new(), StrBuf::new(), TextBuf::new());
                let port = if a.device.is_pid() { port.term(a.device) } else { port.self_pid(env) };
                efile_drv__entry::fire(
                    op.thread_id,
                    op.op_id,
                    user_tag.iolist_or_null(a.user_tag),
                    op.command,
                    s1.iolist_or_null(a.s1),
                    s2.iolist_or_null(a.s2),
                    int64_or_zero(a.i1),
                    int64_or_zero(a.i2),
                    int64_or_zero(a.i3),
                    int64_or_zero(a.i4),
                    port,
                );
            }
            if efile_drv__int_entry::enabled() {
                efile_drv__int_entry::fire(op.thread_id, op.op_id, op.command);
            }
            op.op_id.encode(env)
        })
    }

    /// `efile_return(ThreadId, OpId, Command, UserTag, Success, Reason) -> ok`:
    /// ends the operation `{ThreadId, OpId}`: fires `efile_drv__int_return`
    /// and `efile_drv__return`, each if enabled. `Success` is `true` or
    /// `false`; `errno` is the number of the POSIX atom `Reason`, else 0.
    fn efile_return(call: NifCall) -> ErlNifTerm {
        call.run(|env, args| {
            let Some(a) = ReturnArgs::from_slice(args) else { return ok().to_term(env) };
            let op = EfileOp {
                thread_id: int32_or_zero(a.thread_id),
                op_id: int32_or_zero(a.op_id),
                command: int32_or_zero(a.command),
            };
            if efile_drv__int_return::enabled() {
                efile_drv__int_return::fire(op.thread_id, op.op_id, op.command);
            }
            if efile_drv__return::enabled() {
                let success = a.success.decode::<bool>().unwrap_or(false);
                let errno = if success { 0 } else { errno_of(a.reason) };
                let mut user_tag = StrBuf::new();
                efile_drv__return::fire(
                    op.thread_id,
                    op.op_id,
                    user_tag.iolist_or_null(a.user_tag),
                    op.command,
                    success.into(),
                    errno,
                );
            }
            ok().to_term(env)
        })
    }

    /// A 32-bit integer argument (`int` in the probe), else 0.
    fn int32_or_zero(term: Term<'_>) -> i32 {
        term.decode::<i32>().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_count_per_scheduler() {
        // Schedulers 7 and 8 are used by no other test.
        let a = EfileOp::next(7, 12);
        let b = EfileOp::next(7, 1);
        let c = EfileOp::next(8, 1);
        assert_eq!((a.thread_id, a.command), (7, 12));
        assert_eq!(b.op_id, a.op_id + 1);
        assert_eq!(c.op_id, 1);
        assert!(a.op_id >= 1);
    }

    #[test]
    fn out_of_range_schedulers_share_a_counter_and_op_ids_stay_positive() {
        for t in [-1, 0, 1025, i32::MAX] {
            let op = EfileOp::next(t, 2);
            assert_eq!(op.thread_id, t);
            assert!(op.op_id >= 0);
        }
        OP_COUNTERS[9].store(u32::MAX - 1, Relaxed);
        assert_eq!(EfileOp::next(9, 2).op_id, 0x7fff_ffff);
        assert_eq!(EfileOp::next(9, 2).op_id, 0);
        assert_eq!(EfileOp::next(9, 2).op_id, 1);
    }
}
