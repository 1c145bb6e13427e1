//! The probes, generated from the catalogue `probes.d` (provider `erlang`,
//! OTP's names and argument layouts) by build.rs: one module per probe,
//! named like its ELF note (`probes::user_trace__i4s4`), with its
//! semaphore, `enabled()` and `fire(...)`; numbered families take a label
//! (`probes::user_trace__n::fire(label, ...)`).
//!
//! Each probe has exactly one site and one semaphore (is-enabled flag),
//! which a tracer raises while it listens; the NIFs read it before touching
//! any argument. Argument k of every probe is in the same register (see
//! `dtrace_catalogue`). Strings are [`Str`]: a NUL-terminated string
//! borrowed for the call, or NULL.
//!
//! The backend is chosen at build time: SDT notes on Linux x86_64 and
//! aarch64 (`cfg(dtrace_sdt)`); elsewhere sites that do nothing and
//! semaphores that never rise, so the crate builds and every probe returns
//! `false`.

use std::ffi::c_char;
use std::marker::PhantomData;
use std::ptr;
#[allow(unused_imports)]
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

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

/// For `make bench`'s floor (examples/bare_probe.rs): `user_trace__i4s4`
/// fired from native code with constant arguments, no VM and no
/// conversion. Returns whether it was enabled.
#[doc(hidden)]
#[inline(never)]
pub fn bench_bare_hit(i: i64) -> bool {
    if !user_trace__i4s4::enabled() {
        return false;
    }
    let s = Str::from_cstr(c"s");
    user_trace__i4s4::fire(s, s, i, 2, 3, 4, s, s, Str::NULL, Str::NULL);
    true
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
        assert_eq!(PROBE_COUNT, 982);
        assert_eq!((user_trace__n::FIRST, user_trace__n::LAST, user_trace__n::COUNT), (0, 950, 951));
    }

    /// Raising one semaphore, as a tracer does, enables that probe and no
    /// other: for each of the 982 probes.
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

    #[test]
    fn bench_hit_fires_only_while_enabled() {
        let _lock = SEMAPHORE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!bench_bare_hit(1));
        #[cfg(dtrace_sdt)]
        {
            user_trace__i4s4::SEMAPHORE.fetch_add(1, Relaxed);
            let fired = bench_bare_hit(1);
            user_trace__i4s4::SEMAPHORE.fetch_sub(1, Relaxed);
            assert!(fired);
        }
    }
}
