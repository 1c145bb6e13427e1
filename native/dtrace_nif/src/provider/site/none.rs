//! No sites where probes are not SDT (`cfg(not(dtrace_sdt))`): no
//! provider can be defined there.

use std::ffi::c_void;
use std::ptr::NonNull;

use dtrace_catalogue::MAX_ARGS;

/// No sites without SDT support (no provider can be defined there).
pub(super) fn call_site(_site: NonNull<c_void>, _r: &[u64; MAX_ARGS]) {}

/// No sites without SDT support.
pub(super) fn call_is_enabled(_site: NonNull<c_void>) -> bool {
    false
}
