//! The calls into a provider's sites on x86_64 (SysV registers: `rdi`,
//! `rsi`, `rdx`, `rcx`, `r8`..`r15`, as the catalogue's notes name them).

use std::ffi::c_void;
use std::ptr::NonNull;

use dtrace_catalogue::MAX_ARGS;

/// Calls a site with the twelve argument registers set.
#[inline(never)]
pub(super) fn call_site(site: NonNull<c_void>, r: &[u64; MAX_ARGS]) {
    // SAFETY: `site` is a site of a loaded object (`Probe`): `nop; nop10;
    // ret` (`Arch::site`), where a tracer may put a breakpoint, which traps
    // and returns with every register as it was (a kernel that optimizes
    // the probe turns it into a call, which pushes below the site's stack
    // pointer, where nothing lives: the site keeps nothing on the stack).
    // It reads the argument registers, touches no memory of the program's
    // and returns; `clobber_abi("C")` says no more than that it is a C
    // function. No `nostack`: `call` pushes the return address, and the
    // compiler keeps the stack aligned and the red zone free for it.
    // The strings the registers point to are borrowed for the call
    // (`Registers<'a>`), and the asm may read memory, so they are written
    // before it runs.
    unsafe {
        core::arch::asm!(
            "call {site}",
            site = in(reg) site.as_ptr(),
            in("rdi") r[0], in("rsi") r[1], in("rdx") r[2], in("rcx") r[3],
            in("r8") r[4], in("r9") r[5], in("r10") r[6], in("r11") r[7],
            in("r12") r[8], in("r13") r[9], in("r14") r[10], in("r15") r[11],
            clobber_abi("C"),
        );
    }
}

/// Calls an is-enabled site with the address of a 32-bit word in the first
/// argument register; `true` if DTrace wrote 1 there while it trapped.
#[inline(never)]
pub(super) fn call_is_enabled(site: NonNull<c_void>) -> bool {
    let mut on: u32 = 0;
    // SAFETY: `site` is an is-enabled site of a loaded object (`Probe`):
    // a 1-byte `nop; ret`, where DTrace may put a breakpoint, which traps, may write
    // 4 bytes at the address in `rdi` (`on`, alive across the call), and
    // returns with every register as it was. `clobber_abi("C")`: a C
    // function; no `nostack` (`call` pushes the return address). The asm
    // may write memory, so `on` is read again after it.
    unsafe {
        core::arch::asm!(
            "call {site}",
            site = in(reg) site.as_ptr(),
            in("rdi") &raw mut on,
            clobber_abi("C"),
        );
    }
    on != 0
}
