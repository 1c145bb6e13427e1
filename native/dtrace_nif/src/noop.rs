//! Backend for platforms without SystemTap SDT: no probes, semaphores that
//! never rise. Every probe function returns `false` and `available/0`
//! returns `false`, so code using the library runs unchanged.

use std::ffi::c_char;

use super::{EfileEntry, EfileOp, I4s4};

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

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn efile_enabled() -> bool {
    false
}

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn efile_entry_enabled() -> bool {
    false
}

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn efile_int_entry_enabled() -> bool {
    false
}

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn efile_int_return_enabled() -> bool {
    false
}

/// Always `false`: there is no probe to listen on.
#[inline(always)]
pub fn efile_return_enabled() -> bool {
    false
}

/// Does nothing.
pub fn fire_efile_entry(_op: EfileOp, _a: &EfileEntry) {}

/// Does nothing.
pub fn fire_efile_int_entry(_op: EfileOp) {}

/// Does nothing.
pub fn fire_efile_int_return(_op: EfileOp) {}

/// Does nothing.
pub fn fire_efile_return(_op: EfileOp, _user_tag: *const c_char, _success: bool, _errno: i32) {}
