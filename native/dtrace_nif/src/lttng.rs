//! The LTTng-UST sink: the probes' events recorded by LTTng sessions, at a
//! fraction of a uprobe's cost.
//!
//! - The user, span and file probes are also events of the provider
//!   `org_erlang_dtrace` (`fire` in each probe's module fires every sink).
//! - The VM's events are OTP's own `org_erlang_dyntrace` tracepoints, with
//!   OTP's fields, declared as an LTTng-only provider in `probes.d`
//!   (`probes::org_erlang_dyntrace::*`), fired by the feeds' formatting
//!   functions (`src/vm/`).
//!
//! build.rs generates the tracepoint headers and the call sites from
//! `probes.d`. The call sites (`lttng/shim.c`) are compiled into the NIF; the probes
//! are in the provider package `priv/libdtrace_lttng_tp.so`, which the
//! library's load step opens with dlopen. Without it, or without
//! liblttng-ust on the machine, every tracepoint stays disabled and the SDT
//! probes work as before. A tracepoint's enable state is one `int` that
//! liblttng-ust sets while a session records the event: [`enabled`] reads
//! it, the LTTng counterpart of an SDT semaphore.
//!
//! In a build without the LTTng sink (no `<lttng/tracepoint.h>`, or the
//! cargo feature `lttng` off), the same functions exist and report every
//! event disabled.
// Unit-test builds have no NIFs to call the loader.
#![cfg_attr(test, allow(dead_code, unused_imports))]

use std::ffi::c_char;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

/// The start of `struct lttng_ust_tracepoint` (lttng-ust 2.13,
/// `<lttng/tracepoint-types.h>`), whose layout liblttng-ust.so.1 keeps
/// (fields are only added at the end); `lttng/shim.c` asserts the offsets
/// at build time.
#[repr(C)]
pub(crate) struct Tracepoint {
    struct_size: u32,
    provider_name: *const c_char,
    event_name: *const c_char,
    /// Non-zero while a session records the event.
    state: AtomicI32,
}

/// Is a session recording this event? One load.
#[inline(always)]
#[allow(dead_code)]
pub(crate) fn enabled(tp: &Tracepoint) -> bool {
    tp.state.load(Relaxed) != 0
}

/// Whether the LTTng sink works in this process: `Ok` when the provider
/// package and liblttng-ust loaded, `Err(why)` otherwise.
pub(crate) fn status() -> Result<(), &'static str> {
    match STATUS.get() {
        Some(Ok(())) => Ok(()),
        Some(Err(why)) => Err(why.as_str()),
        None => Err("not loaded"),
    }
}

static STATUS: OnceLock<Result<(), String>> = OnceLock::new();

#[cfg(not(test))]
inventory::submit!(crate::load::LoadStep {
    order: crate::load::order::LTTNG,
    run: |_| {
        load();
        true
    },
});

#[cfg(dtrace_lttng)]
pub(crate) use sink::*;

#[cfg(dtrace_lttng)]
mod sink {
    use std::ffi::{CStr, CString, c_char, c_int, c_void};
    use std::path::Path;

    use super::STATUS;

    unsafe extern "C" {
        fn dtrace_lttng_load(path: *const c_char, err: *mut c_char, err_len: usize) -> c_int;
        fn dtrace_lttng_runtime_present() -> c_int;
    }

    /// Opens the provider package next to this library
    /// (`priv/libdtrace_lttng_tp.so`), once per process; its outcome is
    /// [`super::status`]. The environment variable `DTRACE_LTTNG=off`
    /// leaves the sink out. Opening liblttng-ust registers the process with
    /// the session daemon, which can take up to its timeout
    /// (`LTTNG_UST_REGISTER_TIMEOUT`, 3 s by default; tens of ms here).
    pub(crate) fn load() {
        let _ = STATUS.get_or_init(|| {
            if std::env::var("DTRACE_LTTNG").is_ok_and(|v| v == "off" || v == "0" || v == "false") {
                return Err("turned off (DTRACE_LTTNG=off)".to_string());
            }
            let path = provider_path().ok_or("the NIF library's own path is not known")?;
            let mut err = [0 as c_char; 512];
            // SAFETY: `path` is NUL-terminated; the shim writes at most
            // `err.len()` bytes, NUL included, into `err`.
            let loaded = unsafe { dtrace_lttng_load(path.as_ptr(), err.as_mut_ptr(), err.len()) };
            if loaded == 0 {
                // SAFETY: the shim NUL-terminated it within the buffer.
                let why = unsafe { CStr::from_ptr(err.as_ptr()) };
                return Err(why.to_string_lossy().into_owned());
            }
            // SAFETY: a plain query of the shim's state.
            if unsafe { dtrace_lttng_runtime_present() } == 0 {
                return Err("liblttng-ust-tracepoint.so.1 was not found".to_string());
            }
            Ok(())
        });
    }

    /// `<dir of this library>/libdtrace_lttng_tp.so`, from dladdr.
    fn provider_path() -> Option<CString> {
        let mut info = libc::Dl_info {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        // SAFETY: dladdr fills `info` for an address inside a loaded
        // object (our own function); the name it points to lives as long
        // as the library is loaded.
        if unsafe { libc::dladdr(provider_path as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: checked non-NULL; a NUL-terminated path from the loader.
        let me = unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?;
        let lib = Path::new(me).parent()?.join("libdtrace_lttng_tp.so");
        CString::new(lib.to_str()?).ok()
    }
}

/// Without the LTTng sink: no event is ever enabled.
#[cfg(not(dtrace_lttng))]
pub(crate) fn load() {
    let _ = STATUS.set(Err("built without the LTTng sink".to_string()));
}
