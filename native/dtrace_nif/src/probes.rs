//! The probes, provider `erlang`, with OTP's names and argument layouts
//! (OTP's `erts/emulator/beam/erlang_dtrace.d`):
//!
//! | probe (ELF note name)                    | arguments |
//! |------------------------------------------|-----------|
//! | `user_trace__s1`                         | `char *message` |
//! | `user_trace__i4s4`                       | `char *pid, char *user_tag, int64 i1, int64 i2, int64 i3, int64 i4, char *s1, char *s2, char *s3, char *s4` |
//! | `user_trace__n0` .. `user_trace__n950`   | the same ten arguments |
//! | `efile_drv__entry`                       | `int thread_id, int tag, char *user_tag, int command, char *s1, char *s2, int64 i1, int64 i2, int64 i3, int64 i4, char *port` |
//! | `efile_drv__int_entry`                   | `int thread_id, int tag, int command` |
//! | `efile_drv__int_return`                  | `int thread_id, int tag, int command` |
//! | `efile_drv__return`                      | `int thread_id, int tag, char *user_tag, int command, int success, int errno` |
//!
//! The `efile_drv__*` probes are those of OTP's old file driver (OTP 20's
//! `erlang_dtrace.d`), fired by the Erlang module `dtrace_file`.
//!
//! Each probe has exactly one semaphore (is-enabled flag), which a tracer
//! raises while it listens; the NIFs read it before touching any argument.
//! Integers are full signed 64-bit values (OTP's build truncates them to
//! 32 bits). Absent strings are NULL.
//!
//! The backend is chosen at build time: SystemTap SDT notes on Linux
//! (`sdt.rs`), and elsewhere a backend without probes whose semaphores stay
//! 0 (`noop.rs`), so the crate builds and every probe returns `false`.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

include!(concat!(env!("OUT_DIR"), "/n_probes.rs"));

#[cfg(any(target_os = "linux", target_os = "android"))]
#[path = "sdt.rs"]
mod backend;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[path = "noop.rs"]
mod backend;

pub use backend::{AVAILABLE, fire_i4s4, fire_n, fire_s1, i4s4_enabled, n_enabled, s1_enabled};
pub use backend::{
    efile_enabled, efile_entry_enabled, efile_int_entry_enabled, efile_int_return_enabled, efile_return_enabled,
    fire_efile_entry, fire_efile_int_entry, fire_efile_int_return, fire_efile_return,
};

/// The ten arguments of `user_trace__i4s4` and of the numbered probes, as
/// the probe site passes them. The pointers borrow stack buffers that live
/// until the probe has fired.
#[derive(Clone, Copy, Debug)]
pub struct I4s4 {
    /// The calling process, formatted like `pid_to_list/1`: `<0.84.0>`.
    pub pid: *const c_char,
    /// The caller's user tag, or NULL.
    pub user_tag: *const c_char,
    /// i1..i4; 0 where absent.
    pub ints: [i64; 4],
    /// s1..s4; NULL where absent.
    pub strs: [*const c_char; 4],
}

/// Names one file operation in the four `efile_drv__*` probes, as OTP's
/// driver did: the scheduler that started it and a per-scheduler counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfileOp {
    /// The scheduler number (1..) the operation started on.
    pub thread_id: i32,
    /// The scheduler's operation counter, 1.. (wraps to 0 after `i32::MAX`).
    pub tag: i32,
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
    /// and ids stay unique while fewer than 2^31 operations of one
    /// scheduler are in flight.
    pub fn next(thread_id: i32, command: i32) -> Self {
        let slot = usize::try_from(thread_id).ok().filter(|&t| t <= MAX_SCHEDULERS).unwrap_or(0);
        let n = OP_COUNTERS[slot].fetch_add(1, Relaxed).wrapping_add(1);
        Self { thread_id, tag: (n & 0x7fff_ffff) as i32, command }
    }
}

/// The arguments of `efile_drv__entry` after the operation's id. The
/// pointers borrow stack buffers that live until the probe has fired.
#[derive(Clone, Copy, Debug)]
pub struct EfileEntry {
    /// The caller's user tag (own or adopted), or NULL.
    pub user_tag: *const c_char,
    /// s1, s2: paths; NULL where the command has none.
    pub strs: [*const c_char; 2],
    /// i1..i4: descriptor, flags, sizes, offsets; 0 where unused.
    pub ints: [i64; 4],
    /// Who does the I/O, formatted like `pid_to_list/1` (OTP passed the
    /// driver's port).
    pub port: *const c_char,
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
        assert_eq!(b.tag, a.tag + 1);
        assert_eq!(c.tag, 1);
        assert!(a.tag >= 1);
    }

    #[test]
    fn out_of_range_schedulers_share_a_counter_and_tags_stay_positive() {
        for t in [-1, 0, 1025, i32::MAX] {
            let op = EfileOp::next(t, 2);
            assert_eq!(op.thread_id, t);
            assert!(op.tag >= 0);
        }
        OP_COUNTERS[9].store(u32::MAX - 1, Relaxed);
        assert_eq!(EfileOp::next(9, 2).tag, 0x7fff_ffff);
        assert_eq!(EfileOp::next(9, 2).tag, 0);
        assert_eq!(EfileOp::next(9, 2).tag, 1);
    }
}
