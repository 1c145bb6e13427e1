//! `tracer_nif`: the NIF library of the tracer modules `dtrace_tracer`
//! (src/vm/dtrace_tracer.erl) and `dyntrace` (compat/dyntrace.erl), so that
//! `{tracer, dtrace_tracer, []}` and `{tracer, dyntrace, []}` work on a
//! stock VM as OTP documents the latter for its LTTng build.
//!
//! erl_tracer calls a tracer module's `enabled/3` and `trace/5`, and both
//! must be NIFs of that module; a NIF library belongs to one module, and
//! the library with the probes belongs to the private module `dtrace_nif`.
//! This library has no callbacks of its own: its entry lists
//! `dtrace_nif.so`'s (`dtrace_erl_tracer_nifs`), so every tracer module
//! fires the same probes with the same semaphores. The build installs it
//! once per tracer module, named after the module
//! (`priv/tracer/dtrace_tracer.so`, `priv/compat/dyntrace.so`): each copy
//! is a separate object, and its entry takes its module name from its own
//! file name. It finds `dtrace_nif.so` one directory up (loaded by module
//! `dtrace_nif`, or opened here first) and keeps it loaded (a reference
//! from `dlopen`).
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{CStr, CString, c_int, c_void};
use std::panic::catch_unwind;
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use rustler::codegen_runtime::{ErlNifEntry, ErlNifEnv, ErlNifTerm};
use rustler::sys::ErlNifFunc;

/// The entry, built once, and the module name it points to. The VM only
/// reads it.
struct Entry(ErlNifEntry, #[allow(dead_code)] CString);

// SAFETY: written once inside `OnceLock::get_or_init`, read-only after; its
// pointers point to 'static data (a string literal, and dtrace_nif.so's
// function table, which stays loaded: we hold a dlopen reference).
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

static ENTRY: OnceLock<Option<Entry>> = OnceLock::new();

/// What dtrace_nif.so exports: its erl_tracer callbacks as NIF functions.
type TracerNifs = unsafe extern "C" fn(len: *mut usize) -> *const ErlNifFunc;

/// Called by the VM when a tracer module loads this library. NULL (the
/// load fails, and the module keeps stubs that answer `remove`) when
/// dtrace_nif.so is not loaded or not found, or the file name is not a
/// module name.
#[unsafe(no_mangle)]
pub extern "C" fn nif_init() -> *const ErlNifEntry {
    // SAFETY: rustler's first step of a NIF entry (a no-op on Linux).
    unsafe { rustler::codegen_runtime::internal_write_symbols() };
    catch_unwind(|| match ENTRY.get_or_init(build) {
        Some(entry) => &entry.0 as *const ErlNifEntry,
        None => ptr::null(),
    })
    .unwrap_or(ptr::null())
}

fn build() -> Option<Entry> {
    let (dir, module) = own_path()?;
    let funcs = dtrace_tracer_nifs(&dir)?;
    let mut entry = ErlNifEntry::new(&module, funcs, load);
    entry.upgrade = Some(upgrade);
    Some(Entry(entry, module))
}

/// dtrace_nif.so's callback table, through dlsym on the already loaded
/// library in `dir`'s parent.
fn dtrace_tracer_nifs(dir: &Path) -> Option<&'static [ErlNifFunc]> {
    let path = CString::new(dir.parent()?.join("dtrace_nif.so").to_str()?).ok()?;
    // Opened here if module dtrace_nif has not loaded it yet (a release in
    // embedded mode may load `dtrace_tracer' first): the dynamic loader
    // keeps one copy per file, so dtrace_nif's load_nif gets this same
    // one, with the same semaphores, and its load step sets it up. Until then the
    // callbacks answer `discard' (no trace tag is known yet).
    // SAFETY: dlopen of the library next to this one; the reference it
    // adds is never released, so its code and data stay mapped for good.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: dlsym on a valid handle with a NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, c"dtrace_erl_tracer_nifs".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: dtrace_nif.so defines this symbol with the TracerNifs
    // signature (src/entry.rs there).
    let get: TracerNifs = unsafe { std::mem::transmute::<*mut c_void, TracerNifs>(sym) };
    let mut len = 0usize;
    // SAFETY: it writes the table's length and returns a pointer to a
    // leaked (static) table of that many entries.
    let table = unsafe { get(&mut len) };
    if table.is_null() || len == 0 {
        return None;
    }
    // SAFETY: as above: `len` valid entries, alive while the library is
    // loaded, which is for good.
    Some(unsafe { std::slice::from_raw_parts(table, len) })
}

/// This library's directory and its module name (the file name without
/// `.so`), from dladdr on our own code.
fn own_path() -> Option<(std::path::PathBuf, CString)> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: ptr::null(),
        dli_fbase: ptr::null_mut(),
        dli_sname: ptr::null(),
        dli_saddr: ptr::null_mut(),
    };
    // SAFETY: dladdr fills `info` for an address inside a loaded object
    // (our own function); the file name it points to lives as long as the
    // library is loaded.
    if unsafe { libc::dladdr(nif_init as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: checked non-NULL; a NUL-terminated path from the loader.
    let me = Path::new(unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?);
    let module = me.file_name()?.to_str()?.strip_suffix(".so")?;
    let valid = module.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && module.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return None;
    }
    Some((me.parent()?.to_path_buf(), CString::new(module).ok()?))
}

/// Nothing to set up: the callbacks live in dtrace_nif.so.
unsafe extern "C" fn load(_env: *mut ErlNifEnv, _priv: *mut *mut c_void, _info: ErlNifTerm) -> c_int {
    0
}

/// A new version of the tracer module takes the library over: nothing to
/// do (no state).
unsafe extern "C" fn upgrade(
    _env: *mut ErlNifEnv,
    _priv: *mut *mut c_void,
    _old_priv: *mut *mut c_void,
    _info: ErlNifTerm,
) -> c_int {
    0
}
