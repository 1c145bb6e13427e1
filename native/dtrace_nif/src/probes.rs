//! The probes, provider `erlang`, with OTP's names and argument layouts
//! (OTP's `erts/emulator/beam/erlang_dtrace.d`):
//!
//! | probe (ELF note name)                    | arguments |
//! |------------------------------------------|-----------|
//! | `user_trace__s1`                         | `char *message` |
//! | `user_trace__i4s4`                       | `char *pid, char *user_tag, int64 i1, int64 i2, int64 i3, int64 i4, char *s1, char *s2, char *s3, char *s4` |
//! | `user_trace__n0` .. `user_trace__n950`   | the same ten arguments |
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

include!(concat!(env!("OUT_DIR"), "/n_probes.rs"));

#[cfg(any(target_os = "linux", target_os = "android"))]
#[path = "sdt.rs"]
mod backend;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[path = "noop.rs"]
mod backend;

pub use backend::{AVAILABLE, fire_i4s4, fire_n, fire_s1, i4s4_enabled, n_enabled, s1_enabled};

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
