//! The probes, generated from the catalogue `probes.d` by build.rs: one
//! module per probe of provider `erlang`, named like its ELF note
//! (`probes::user_trace__i4s4`), and one per LTTng-only event under its
//! provider (`probes::org_erlang_dyntrace::process_spawn`). Every module has
//! the same API:
//! - `enabled()`: is anybody listening, in any sink (the SDT semaphore, the
//!   LTTng event's state)? One load per sink;
//! - `fire(args...)`: fires in every sink that listens.
//!
//! Numbered families take a label first (`user_trace__n::fire(label, ...)`).
//! Under them, per sink: `sdt_enabled()` and `lttng_enabled()`.
//!
//! Each SDT probe has exactly one site and one semaphore (is-enabled flag),
//! which a tracer raises while it listens; the NIFs read it before touching
//! any argument. Argument k of every probe is in the same register (see
//! `dtrace_catalogue`). Strings are [`Str`]: a NUL-terminated string
//! borrowed for the call, or NULL.
//!
//! The templates the generated code is made of are the macros below
//! ([`sdt_site!`], [`lttng_state!`], [`lttng_event!`]): they hold every
//! `unsafe` block of the probes and its safety argument, and the generated
//! code has none. The backend is chosen at build time: SDT notes on Linux
//! x86_64 and aarch64 (`cfg(dtrace_sdt)`); elsewhere sites that do nothing
//! and semaphores that never rise, so the crate builds and every probe
//! returns `false`.

use std::ffi::c_char;
use std::marker::PhantomData;
use std::ptr;
#[allow(unused_imports)]
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

/// One SDT probe site, as `sys/sdt.h` lays it out: the site's instruction
/// (`SITE`, `Arch::site_asm`: `nop; nop10` on x86_64, `nop` on aarch64; a
/// tracer replaces its first byte with a breakpoint), a `.note.stapsdt`
/// note naming the provider, the probe, its semaphore's address and where
/// each argument is, and the `.stapsdt.base` section tracers use to
/// relocate it. Each argument is put in its fixed register (`in("rdi")
/// value` on x86_64, `in("x0") value` on aarch64). The template is the same
/// on both: the site and assembler directives, which read alike in x86's
/// Intel syntax and aarch64's.
///
/// The same instruction is the probe's DOF site (module `dof`): a site
/// record (`dof_site_record!`, kind 0) gives its address, and arguments past
/// the registers DTrace reads at a DOF probe are also copied to the stack
/// around it (`STACK`, `FREE`: `Arch::dof_stack_args`, empty strings for a
/// probe without such arguments), where DTrace reads them.
///
/// `sdt_site!(SITE, PROVIDER, NAME, "{sem}+OFFSET", NOTE_ARGS, INDEX, STACK, FREE, sem = sym STATIC, ["rdi" = v, ...])`
#[cfg(all(dtrace_sdt, any(target_arch = "x86_64", target_arch = "aarch64")))]
macro_rules! sdt_site {
    ($site:literal, $provider:literal, $name:literal, $semaphore:literal, $args:literal, $index:literal,
     $stack:literal, $free:literal, $sym:ident = sym $static:path, [$($reg:tt = $value:expr),* $(,)?]) => {
        // SAFETY: the block is the site's no-op instructions (a tracer may
        // replace the first with a breakpoint, which traps and returns here
        // with every register as it was; a kernel that optimizes the probe
        // may turn the instruction into a call, which pushes below the
        // stack pointer), ELF notes and records in sections the code never
        // reads, and, for a probe with arguments past DTrace's registers,
        // a copy of those registers into stack space it reserves before
        // the site and gives back after it, leaving `rsp`/`sp` as it found
        // it. Hence no `nostack`: the compiler keeps the stack aligned and
        // keeps nothing below the stack pointer (the red zone) across the
        // block, so neither the copy nor a kernel's call overwrites live
        // data (the red-zone suite, dtrace_red_zone_SUITE, checks the
        // library's code for it and the site form under optimizing
        // tracers). It writes no register and no memory of the program's,
        // and leaves the flags alone (`lea`, and `sub`/`add` without `s`:
        // `preserves_flags`). Not `readonly`, since it writes its stack
        // space; the compiler therefore stores the string buffers the
        // pointers point to, which a tracer reads, before it. Those
        // pointers are NULL or point to NUL-terminated buffers borrowed
        // for the call (`Str<'_>`).
        unsafe {
            ::core::arch::asm!(
                $stack,
                concat!("990: ", $site),
                $free,
                ".pushsection .note.stapsdt, \"?\", \"note\"",
                ".balign 4",
                ".4byte 992f-991f, 994f-993f, 3",
                "991: .asciz \"stapsdt\"",
                "992: .balign 4",
                "993: .8byte 990b",
                ".8byte _.stapsdt.base",
                concat!(".8byte ", $semaphore),
                concat!(".asciz \"", $provider, "\""),
                concat!(".asciz \"", $name, "\""),
                concat!(".asciz \"", $args, "\""),
                "994: .balign 4",
                ".popsection",
                ".ifndef _.stapsdt.base",
                ".pushsection .stapsdt.base, \"aGR\", \"progbits\", .stapsdt.base, comdat",
                ".weak _.stapsdt.base",
                ".hidden _.stapsdt.base",
                "_.stapsdt.base: .space 1",
                ".size _.stapsdt.base, 1",
                ".popsection",
                ".endif",
                crate::probes::dof_site_record!($index, 0),
                $sym = sym $static,
                $(in($reg) $value,)*
                options(preserves_flags),
            );
        }
    };
}

/// The record of one DOF site, in section `dtrace_nif_sites` (allocated,
/// read-only, kept by the linker: `R`): the site's address relative to the
/// record, the probe's index in the catalogue and the kind (0: the probe
/// site, 1: its is-enabled site), 16 bytes. Module `dof` reads them
/// between `__start_dtrace_nif_sites` and `__stop_dtrace_nif_sites`. One
/// assembler string, for an `asm!` whose label `990` is the site.
#[cfg(dtrace_sdt)]
macro_rules! dof_site_record {
    ($index:literal, $kind:literal) => {
        concat!(
            ".pushsection dtrace_nif_sites, \"aR\", \"progbits\"\n",
            ".balign 8\n",
            ".8byte 990b - .\n",
            ".4byte ",
            $index,
            ", ",
            $kind,
            "\n",
            ".popsection"
        )
    };
}
#[cfg(dtrace_sdt)]
pub(crate) use dof_site_record;

/// A probe's is-enabled site for DTrace's DOF probes, as Linux DTrace
/// (dtrace-utils) defines it: a `nop` at which the first argument register
/// points to a 32-bit word, into which DTrace writes 1 while it listens
/// (`bpf_probe_write_user`, which kernel lockdown refuses). Evaluates to
/// that word `!= 0`. Its record is kind 1.
///
/// A 1-byte `nop` on both architectures, unlike the probe site, and it must
/// stay one: the block is `nostack`, so the compiler may keep `on` (or
/// anything) below the stack pointer across it, which only an instruction
/// no kernel optimizes into a call leaves alone (a unit test checks the
/// byte).
///
/// `dof_is_enabled_site!(INDEX, "rdi")`
#[cfg(all(dtrace_sdt, any(target_os = "linux", target_os = "android")))]
macro_rules! dof_is_enabled_site {
    ($index:literal, $reg:tt) => {{
        let mut on: u32 = 0;
        // SAFETY: one 1-byte `nop` (a tracer may replace it with a
        // breakpoint, which traps and returns here with every register and
        // all memory below the stack pointer as it was: no kernel optimizes
        // a probe on it) and a record in a section the code never reads.
        // The register holds
        // the address of `on`, a live local the tracer may write 4 bytes
        // to while the site traps; the block itself writes nothing, pushes
        // nothing and leaves the flags alone. Without `nomem`/`readonly`
        // the compiler reads `on` again after it.
        unsafe {
            ::core::arch::asm!(
                "990: nop",
                crate::probes::dof_site_record!($index, 1),
                in($reg) &raw mut on,
                options(nostack, preserves_flags),
            );
        }
        on != 0
    }};
}

/// A probe's is-enabled site for DTrace's DOF probes on illumos and
/// FreeBSD (x86_64), as their `dtrace -G` writes it: `xor eax, eax`, which
/// the fasttrap provider replaces while DTrace listens so that `eax` is 1.
/// Evaluates to `eax != 0`. Built by `cargo check` for those targets only,
/// never run by this project (docs/support.md, "DTrace, DOF on illumos and FreeBSD").
#[cfg(all(dtrace_sdt, any(target_os = "illumos", target_os = "freebsd")))]
macro_rules! dof_is_enabled_site {
    ($index:literal, $reg:tt) => {{
        let on: u32;
        // SAFETY: one `xor` of a register the block declares as its output
        // (fasttrap may replace it; it then sets that register to 1) and a
        // record in a section the code never reads. No memory, no stack;
        // `xor` sets flags, so no `preserves_flags`.
        unsafe {
            ::core::arch::asm!(
                "990: xor eax, eax",
                crate::probes::dof_site_record!($index, 1),
                out("eax") on,
                options(nomem, nostack),
            );
        }
        let _ = $reg;
        on != 0
    }};
}
#[cfg(dtrace_sdt)]
pub(crate) use dof_is_enabled_site;

#[cfg(dtrace_sdt)]
pub(crate) use sdt_site;

/// Is an LTTng session recording the event of tracepoint `$tp` (an extern
/// static the generated code declares)? One load.
#[cfg(dtrace_lttng)]
macro_rules! lttng_state {
    ($tp:ident) => {
        // SAFETY: the tracepoint is defined in lttng/shim.c, which is
        // linked into this library, so the static lives as long as the
        // code reading it; liblttng-ust writes its state atomically, and
        // it is only read here.
        crate::lttng::enabled(unsafe { &$tp })
    };
}
#[cfg(dtrace_lttng)]
pub(crate) use lttng_state;

/// Records an LTTng event: calls its call site in lttng/shim.c with the
/// argument struct.
#[cfg(dtrace_lttng)]
macro_rules! lttng_event {
    ($shim:ident, $args:expr) => {
        // SAFETY: the call site (lttng/shim.c) reads the struct, whose
        // strings are NULL or NUL-terminated buffers borrowed for the call,
        // during the call only, and keeps no pointer to it.
        unsafe { $shim($args) }
    };
}
#[cfg(dtrace_lttng)]
pub(crate) use lttng_event;

include!(concat!(env!("OUT_DIR"), "/probes.rs"));

/// Probes fire on this platform.
pub const AVAILABLE: bool = cfg!(dtrace_sdt);

/// A string argument of a probe: a pointer to a NUL-terminated string that
/// lives at least as long as `'a`, or NULL. What a site passes in its
/// register; a tracer reads the string through it while the site runs.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct Str<'a> {
    ptr: *const c_char,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> Str<'a> {
    /// NULL: an absent string.
    pub const NULL: Str<'static> = Str { ptr: ptr::null(), _borrow: PhantomData };

    /// The C string at the start of `bytes`, which must end with a NUL
    /// (the string is what comes before the first NUL); `None` otherwise.
    #[inline]
    pub fn from_bytes_with_nul(bytes: &'a [u8]) -> Option<Str<'a>> {
        match bytes.last() {
            Some(0) => Some(Str { ptr: bytes.as_ptr().cast(), _borrow: PhantomData }),
            _ => None,
        }
    }

    /// The C string `s`.
    #[inline]
    pub fn from_cstr(s: &'a std::ffi::CStr) -> Str<'a> {
        Str { ptr: s.as_ptr(), _borrow: PhantomData }
    }

    /// The pointer the site passes.
    #[inline(always)]
    pub fn as_ptr(self) -> *const c_char {
        self.ptr
    }

    /// Is this NULL?
    #[inline(always)]
    pub fn is_null(self) -> bool {
        self.ptr.is_null()
    }
}

/// Tests that raise semaphores, or assert that none is raised, hold this
/// lock: `cargo test` runs tests on several threads, and semaphores are
/// process-wide.
#[cfg(test)]
pub(crate) static SEMAPHORE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_probe_of_the_catalogue_is_generated() {
        assert_eq!(PROVIDER, "erlang");
        assert_eq!(PROBE_COUNT, 1028);
        assert_eq!((user_trace__n::FIRST, user_trace__n::LAST, user_trace__n::COUNT), (0, 950, 951));
    }

    /// Raising one semaphore, as a tracer does, enables that probe and no
    /// other: for each of the 1028 probes.
    #[cfg(dtrace_sdt)]
    #[test]
    fn each_probe_reads_its_own_semaphore() {
        let _lock = SEMAPHORE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(listened(), Vec::<String>::new());
        let all = semaphores();
        assert_eq!(all.len(), PROBE_COUNT);
        for (name, semaphore) in all {
            semaphore.fetch_add(1, Relaxed);
            let on = listened();
            semaphore.fetch_sub(1, Relaxed);
            assert_eq!(on, vec![name]);
        }
        assert!(!user_trace__n::enabled(951) && !user_trace__n::enabled(usize::MAX));
        assert!(!org_erlang_dyntrace::message_send::enabled());
    }

    /// Every compiled probe site is the catalogue's site (`Arch::site`,
    /// what run-time providers' objects and the red-zone suite use too),
    /// and every DOF is-enabled site a 1-byte `nop` (its block is
    /// `nostack`: `dof_is_enabled_site!`). Read from this binary's own code,
    /// at the addresses the DOF records give.
    #[cfg(dtrace_sdt)]
    #[test]
    fn every_site_is_the_catalogues_and_every_is_enabled_site_one_nop() {
        let arch = dtrace_catalogue::Arch::from_target_arch(std::env::consts::ARCH).expect("an SDT architecture");
        let site = arch.site();
        let sites = crate::dof::sites();
        assert!(sites.len() >= 2 * PROBE_COUNT, "{} sites", sites.len());
        let code = |address: u64, len: usize| {
            // SAFETY: `address` is a site of this binary (its record in
            // `dtrace_nif_sites`, `dof::sites`), in its text, mapped
            // readable for the life of the process, and a site is followed
            // by at least `len` bytes of the same function's code (the
            // template's instructions, then the function's return).
            unsafe { std::slice::from_raw_parts(address as *const u8, len) }
        };
        for s in &sites {
            match s.kind {
                crate::dof::Kind::Probe => assert_eq!(code(s.address, site.len()), site, "probe {}", s.index),
                crate::dof::Kind::IsEnabled => {
                    let nop: &[u8] = if cfg!(target_arch = "x86_64") { &[0x90] } else { &[0x1f, 0x20, 0x03, 0xd5] };
                    let after = code(s.address, nop.len() + site.len());
                    assert_eq!(&after[..nop.len()], nop, "is-enabled {}", s.index);
                    assert_ne!(&after[nop.len()..], &site[nop.len()..], "is-enabled {}: one nop only", s.index);
                }
            }
        }
    }

    #[test]
    fn firing_without_a_tracer_is_a_nop() {
        fire_all_with_nulls();
    }

    #[test]
    fn strings_end_with_a_nul_or_are_refused() {
        assert!(Str::from_bytes_with_nul(b"abc\0").is_some_and(|s| !s.is_null()));
        assert!(Str::from_bytes_with_nul(b"a\0b\0").is_some());
        assert!(Str::from_bytes_with_nul(b"abc").is_none());
        assert!(Str::from_bytes_with_nul(b"").is_none());
        assert!(Str::NULL.is_null());
    }
}

// The load step: OTP's probes no event feeds keep their sites and notes
// (OTP's scripts name them); fires nothing.
#[cfg(not(test))]
inventory::submit!(crate::load::LoadStep {
    order: crate::load::order::DECLARED_SITES,
    run: |_| {
        keep_declared_sites();
        true
    },
});
