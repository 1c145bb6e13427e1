//! SystemTap SDT backend (Linux).
//!
//! The ELF notes (`.note.stapsdt`) and the `nop` at each site are written by
//! the `probe` crate's `sdt!` macro; the semaphores are ours. We do not use
//! `probe::probe_lazy!` because each of its expansions owns a hidden
//! semaphore: the NIFs could not check it before decoding their arguments,
//! nor return `badarg` without firing (`user_trace_s1`). With our own
//! semaphores the order is exactly OTP's: is-enabled, convert, fire.
//! (`usdt`, the other SDT crate, rejects probes of more than six arguments
//! and renames `__` to `-`, so it cannot express these probes at all.)
//!
//! Semaphores are 16-bit counters in the `.probes` section, as `sys/sdt.h`
//! lays them out; tracers (the kernel's uprobe `ref_ctr`, bpftrace, gdb)
//! increment them while attached. They are atomics so that the compiler
//! re-reads them on every call.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

use super::{EfileEntry, EfileOp, I4s4, N_PROBES};

/// Probes fire on this platform.
pub const AVAILABLE: bool = true;

#[unsafe(link_section = ".probes")]
static S1_SEMAPHORE: AtomicU16 = AtomicU16::new(0);

#[unsafe(link_section = ".probes")]
static I4S4_SEMAPHORE: AtomicU16 = AtomicU16::new(0);

/// One semaphore per numbered probe, indexed by label: the note of
/// `user_trace__nL` names the address of `N_SEMAPHORES[L]`.
#[unsafe(link_section = ".probes")]
static N_SEMAPHORES: [AtomicU16; N_PROBES] = [const { AtomicU16::new(0) }; N_PROBES];

#[unsafe(link_section = ".probes")]
static EFILE_ENTRY_SEMAPHORE: AtomicU16 = AtomicU16::new(0);

#[unsafe(link_section = ".probes")]
static EFILE_INT_ENTRY_SEMAPHORE: AtomicU16 = AtomicU16::new(0);

#[unsafe(link_section = ".probes")]
static EFILE_INT_RETURN_SEMAPHORE: AtomicU16 = AtomicU16::new(0);

#[unsafe(link_section = ".probes")]
static EFILE_RETURN_SEMAPHORE: AtomicU16 = AtomicU16::new(0);

/// Is a tracer listening on `user_trace__s1`?
#[inline(always)]
pub fn s1_enabled() -> bool {
    S1_SEMAPHORE.load(Relaxed) != 0
}

/// Is a tracer listening on `user_trace__i4s4`?
#[inline(always)]
pub fn i4s4_enabled() -> bool {
    I4S4_SEMAPHORE.load(Relaxed) != 0
}

/// Is a tracer listening on `user_trace__n<label>`? `false` for a label
/// with no probe.
#[inline(always)]
pub fn n_enabled(label: usize) -> bool {
    N_SEMAPHORES.get(label).is_some_and(|s| s.load(Relaxed) != 0)
}

/// Is a tracer listening on any of the four `efile_drv__*` probes? (A
/// file operation then takes an id and fires those that are.)
#[inline(always)]
pub fn efile_enabled() -> bool {
    (EFILE_ENTRY_SEMAPHORE.load(Relaxed)
        | EFILE_INT_ENTRY_SEMAPHORE.load(Relaxed)
        | EFILE_INT_RETURN_SEMAPHORE.load(Relaxed)
        | EFILE_RETURN_SEMAPHORE.load(Relaxed))
        != 0
}

/// Is a tracer listening on `efile_drv__entry`?
#[inline(always)]
pub fn efile_entry_enabled() -> bool {
    EFILE_ENTRY_SEMAPHORE.load(Relaxed) != 0
}

/// Is a tracer listening on `efile_drv__int_entry`?
#[inline(always)]
pub fn efile_int_entry_enabled() -> bool {
    EFILE_INT_ENTRY_SEMAPHORE.load(Relaxed) != 0
}

/// Is a tracer listening on `efile_drv__int_return`?
#[inline(always)]
pub fn efile_int_return_enabled() -> bool {
    EFILE_INT_RETURN_SEMAPHORE.load(Relaxed) != 0
}

/// Is a tracer listening on `efile_drv__return`?
#[inline(always)]
pub fn efile_return_enabled() -> bool {
    EFILE_RETURN_SEMAPHORE.load(Relaxed) != 0
}

// Soundness of every `probe::sdt!` below: the macro's `asm!` block is a
// single `nop` plus an ELF note in a non-loaded section; it reads the
// argument registers, writes no memory and no register, and does not touch
// the stack (`nostack`, `readonly`, `preserves_flags`). The string pointers
// it passes are either NULL or point to NUL-terminated stack buffers that
// outlive the call; only an attached tracer reads through them.

/// Fires `user_trace__s1(char *message)`.
#[inline(never)]
pub fn fire_s1(message: *const c_char) {
    probe::sdt!([sym "{}" S1_SEMAPHORE], erlang, user_trace__s1, message,);
}

/// Fires `user_trace__i4s4(pid, user_tag, i1..i4, s1..s4)`.
#[inline(never)]
pub fn fire_i4s4(a: &I4s4) {
    probe::sdt!(
        [sym "{}" I4S4_SEMAPHORE], erlang, user_trace__i4s4,
        a.pid, a.user_tag, a.ints[0], a.ints[1], a.ints[2], a.ints[3],
        a.strs[0], a.strs[1], a.strs[2], a.strs[3],
    );
}

/// Fires `efile_drv__entry(thread_id, tag, user_tag, command, s1, s2,
/// i1, i2, i3, i4, port)`: eleven arguments, each in a register (x86_64
/// has 13 general registers the `asm!` block may use; aarch64 has more).
#[inline(never)]
pub fn fire_efile_entry(op: EfileOp, a: &EfileEntry) {
    probe::sdt!(
        [sym "{}" EFILE_ENTRY_SEMAPHORE], erlang, efile_drv__entry,
        op.thread_id, op.tag, a.user_tag, op.command, a.strs[0], a.strs[1],
        a.ints[0], a.ints[1], a.ints[2], a.ints[3], a.port,
    );
}

/// Fires `efile_drv__int_entry(thread_id, tag, command)`.
#[inline(never)]
pub fn fire_efile_int_entry(op: EfileOp) {
    probe::sdt!(
        [sym "{}" EFILE_INT_ENTRY_SEMAPHORE], erlang, efile_drv__int_entry,
        op.thread_id, op.tag, op.command,
    );
}

/// Fires `efile_drv__int_return(thread_id, tag, command)`.
#[inline(never)]
pub fn fire_efile_int_return(op: EfileOp) {
    probe::sdt!(
        [sym "{}" EFILE_INT_RETURN_SEMAPHORE], erlang, efile_drv__int_return,
        op.thread_id, op.tag, op.command,
    );
}

/// Fires `efile_drv__return(thread_id, tag, user_tag, command, success,
/// errno)`; `success` is passed as 1 or 0.
#[inline(never)]
pub fn fire_efile_return(op: EfileOp, user_tag: *const c_char, success: bool, errno: i32) {
    probe::sdt!(
        [sym "{}" EFILE_RETURN_SEMAPHORE], erlang, efile_drv__return,
        op.thread_id, op.tag, user_tag, op.command, success as i32, errno,
    );
}

/// One site per numbered probe, generated from the table in build.rs.
macro_rules! define_fire_n {
    ($(($label:literal $name:ident $semaphore:literal))*) => {
        /// Fires `user_trace__n<label>` with the i4s4 arguments; does
        /// nothing for a label with no probe.
        #[inline(never)]
        pub fn fire_n(label: usize, a: &I4s4) {
            match label {
                $($label => {
                    probe::sdt!(
                        [sym $semaphore N_SEMAPHORES], erlang, $name,
                        a.pid, a.user_tag, a.ints[0], a.ints[1], a.ints[2], a.ints[3],
                        a.strs[0], a.strs[1], a.strs[2], a.strs[3],
                    );
                })*
                _ => {}
            }
        }
    };
}

n_probe_sites!(define_fire_n);

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    /// Raises a semaphore as a tracer would, and lowers it on drop.
    struct Attached(&'static AtomicU16);
    impl Attached {
        fn new(s: &'static AtomicU16) -> Self {
            s.fetch_add(1, Relaxed);
            Self(s)
        }
    }
    impl Drop for Attached {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Relaxed);
        }
    }

    #[test]
    fn each_numbered_probe_reads_its_own_semaphore() {
        assert_eq!(N_PROBES, 951);
        for label in [0, 1, 475, 949, 950] {
            let _t = Attached::new(&N_SEMAPHORES[label]);
            let enabled: Vec<usize> = (0..N_PROBES).filter(|&l| n_enabled(l)).collect();
            assert_eq!(enabled, vec![label]);
            assert!(!i4s4_enabled() && !s1_enabled() && !efile_enabled());
        }
        assert!(!n_enabled(N_PROBES) && !n_enabled(usize::MAX));
    }

    #[test]
    fn s1_and_i4s4_semaphores_are_separate() {
        let _t = Attached::new(&I4S4_SEMAPHORE);
        assert!(i4s4_enabled() && !s1_enabled());
        assert!((0..N_PROBES).all(|l| !n_enabled(l)));
    }

    #[test]
    fn each_efile_probe_raises_efile_enabled_alone() {
        type Probe = (&'static AtomicU16, fn() -> bool);
        let probes: [Probe; 4] = [
            (&EFILE_ENTRY_SEMAPHORE, efile_entry_enabled),
            (&EFILE_INT_ENTRY_SEMAPHORE, efile_int_entry_enabled),
            (&EFILE_INT_RETURN_SEMAPHORE, efile_int_return_enabled),
            (&EFILE_RETURN_SEMAPHORE, efile_return_enabled),
        ];
        assert!(!efile_enabled());
        for (i, (semaphore, _)) in probes.iter().enumerate() {
            let _t = Attached::new(semaphore);
            assert!(efile_enabled());
            let on: Vec<usize> = (0..4).filter(|&j| probes[j].1()).collect();
            assert_eq!(on, vec![i]);
            assert!(!i4s4_enabled() && !s1_enabled() && !n_enabled(0));
        }
        assert!(!efile_enabled());
    }

    #[test]
    fn firing_without_a_tracer_is_a_nop() {
        let a = I4s4 { pid: ptr::null(), user_tag: ptr::null(), ints: [1, 2, 3, 4], strs: [ptr::null(); 4] };
        fire_s1(ptr::null());
        fire_i4s4(&a);
        for label in [0, 950, 951, usize::MAX] {
            fire_n(label, &a);
        }
        let op = EfileOp { thread_id: 1, tag: 1, command: 12 };
        let e = EfileEntry { user_tag: ptr::null(), strs: [ptr::null(); 2], ints: [0; 4], port: ptr::null() };
        fire_efile_entry(op, &e);
        fire_efile_int_entry(op);
        fire_efile_int_return(op);
        fire_efile_return(op, ptr::null(), false, 2);
    }
}
