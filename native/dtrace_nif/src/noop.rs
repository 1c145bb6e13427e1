//! Backend for platforms without SystemTap SDT: no probes, semaphores that
//! never rise. Every probe function returns `false` and `available/0`
//! returns `false`, so code using the library runs unchanged.

use std::ffi::c_char;

use super::I4s4;

/// Probes never fire on this platform.
pub const AVAILABLE: bool = false;

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn s1_enabled() -> bool {
    false
}

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn i4s4_enabled() -> bool {
    false
}

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn n_enabled(_label: usize) -> bool {
    false
}

/// Does nothing.
pub fn fire_s1(_message: *const c_char) {}

/// Does nothing.
pub fn fire_i4s4(_a: &I4s4) {}

/// Does nothing.
pub fn fire_n(_label: usize, _a: &I4s4) {}
