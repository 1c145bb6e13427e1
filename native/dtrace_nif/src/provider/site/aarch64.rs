//! The calls into a provider's sites on aarch64 (`x0`..`x11`, as the
//! catalogue's notes name them).

use std::ffi::c_void;
use std::ptr::NonNull;

use dtrace_catalogue::MAX_ARGS;

/// Calls a site with the twelve argument registers set.
#[inline(never)]
pub(super) fn call_site(site: NonNull<c_void>, r: &[u64; MAX_ARGS]) {
    // SAFETY: as in site/x86_64.rs: the site is `nop; ret` of a loaded object;
    // `blr` sets the link register, which `clobber_abi("C")` declares
    // clobbered with the other caller-saved registers.
    unsafe {
        core::arch::asm!(
            "blr {site}",
            site = in(reg) site.as_ptr(),
            in("x0") r[0], in("x1") r[1], in("x2") r[2], in("x3") r[3],
            in("x4") r[4], in("x5") r[5], in("x6") r[6], in("x7") r[7],
            in("x8") r[8], in("x9") r[9], in("x10") r[10], in("x11") r[11],
            clobber_abi("C"),
        );
    }
}

/// Calls an is-enabled site with the address of a 32-bit word in the first
/// argument register; `true` if DTrace wrote 1 there while it trapped.
#[inline(never)]
pub(super) fn call_is_enabled(site: NonNull<c_void>) -> bool {
    let mut on: u32 = 0;
    // SAFETY: as in site/x86_64.rs: `site` is an is-enabled site of a
    // loaded object (`nop; ret`), where DTrace may write 4 bytes at the
    // address in `x0` (`on`, alive across the call); `blr` sets the link
    // register, among those `clobber_abi("C")` declares clobbered. The asm
    // may write memory, so `on` is read again after it.
    unsafe {
        core::arch::asm!(
            "blr {site}",
            site = in(reg) site.as_ptr(),
            in("x0") &raw mut on,
            clobber_abi("C"),
        );
    }
    on != 0
}
