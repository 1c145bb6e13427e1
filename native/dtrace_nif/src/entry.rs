//! The NIF library entry the VM looks up, `nif_init`.
//!
//! It is what `rustler::init!("dtrace_nif", load = ...)` builds (the
//! functions in rustler's registry but the erl_tracer callbacks, rustler's
//! symbol set-up and resource registration, our `load`) plus an `upgrade`
//! callback, which
//! `rustler::init!` 0.39 cannot register. It uses rustler's
//! `#[doc(hidden)]` `codegen_runtime`, as `init!`'s own expansion does; see
//! nif.rs for why rustler is pinned and how an upgrade is checked. Without one, the VM refuses the
//! library to a new version of the `dtrace_nif` module while the old version is
//! still loaded (`l(dtrace_nif)`, a relup, `code:load_file/1`): the new code's
//! probes would return `false` for good. With it, the new code binds to the
//! same loaded library: same semaphores, so attached tracers keep working.

use std::ffi::{c_int, c_void};
use std::panic::catch_unwind;
use std::ptr;
use std::sync::OnceLock;

use rustler::codegen_runtime::{ErlNifEntry, ErlNifEnv, ErlNifTerm, ResourceRegistration};
use rustler::sys::ErlNifFunc;
use rustler::{Env, Nif, Term};

/// The entry, built once. The VM only reads it.
struct Entry(ErlNifEntry);

// SAFETY: the entry is written once, inside `OnceLock::get_or_init`, and
// only read afterwards; its pointers point to 'static data (a leaked
// function table, string literals).
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

static ENTRY: OnceLock<Entry> = OnceLock::new();

/// Called by the VM when `erlang:load_nif/2` opens the library. Never
/// unwinds: should building the entry panic, the VM gets NULL and
/// `load_nif` returns an error.
#[unsafe(no_mangle)]
pub extern "C" fn nif_init() -> *const ErlNifEntry {
    // SAFETY: rustler's own first step in `nif_init`: fills its table of
    // VM functions where they are looked up at run time (a no-op on Linux,
    // where they are linked directly).
    unsafe { rustler::codegen_runtime::internal_write_symbols() };
    catch_unwind(|| {
        &ENTRY
            .get_or_init(|| {
                let funcs: &'static [ErlNifFunc] =
                    Box::leak(inventory::iter::<Nif>().map(Nif::get_def).filter(|f| !is_tracer_callback(f)).collect());
                let mut entry = ErlNifEntry::new(c"dtrace_nif", funcs, load);
                entry.upgrade = Some(upgrade);
                entry.unload = Some(unload);
                Entry(entry)
            })
            .0 as *const ErlNifEntry
    })
    .unwrap_or(ptr::null())
}

/// First load of the library.
unsafe extern "C" fn load(env: *mut ErlNifEnv, _priv: *mut *mut c_void, info: ErlNifTerm) -> c_int {
    let scope = ();
    // SAFETY: the VM passes a valid env, and a load-info term of it, for the
    // duration of this call.
    let (env, info) = unsafe {
        let env = Env::new_init_env(&scope, env);
        (env, Term::new(env, info))
    };
    let loaded =
        catch_unwind(|| ResourceRegistration::register_all_collected(env).is_ok() && crate::nif::load(env, info));
    if matches!(loaded, Ok(true)) { 0 } else { 1 }
}

/// A new version of module `dtrace_nif` loads the library the old version
/// holds. Atoms, immediates and semaphores are in statics that stay as they
/// are; the families' load steps run again (each is idempotent) so that
/// the run-time providers' resource type passes to the new version
/// (`ERL_NIF_RT_TAKEOVER`): purging the old version would otherwise free
/// it, or orphan it with the handles of it.
unsafe extern "C" fn upgrade(
    env: *mut ErlNifEnv,
    _priv: *mut *mut c_void,
    _old_priv: *mut *mut c_void,
    info: ErlNifTerm,
) -> c_int {
    let scope = ();
    // SAFETY: as in `load`: the VM's env and load-info term, for this call.
    let (env, info) = unsafe {
        let env = Env::new_init_env(&scope, env);
        (env, Term::new(env, info))
    };
    if matches!(catch_unwind(|| crate::nif::load(env, info)), Ok(true)) { 0 } else { 1 }
}

/// An instance of module `dtrace_nif` is purged: the last one using the
/// library takes its DOF back from DTrace's helper device (`dof::unload`),
/// before the VM may unload the library's code.
unsafe extern "C" fn unload(_env: *mut ErlNifEnv, _priv: *mut c_void) {
    let _ = catch_unwind(crate::dof::unload);
}

/// The erl_tracer callbacks (`enabled/3`, `trace/5`) as NIF functions, for
/// the library of the tracer modules `dtrace` and `dyntrace`
/// (`native/tracer_nif`): its entry lists these, so `{tracer, dtrace, []}`
/// and `{tracer, dyntrace, []}` fire the probes of this library. Writes the
/// number of entries to `len` and returns a table that lives as long as
/// this library.
#[unsafe(no_mangle)]
pub extern "C" fn dtrace_erl_tracer_nifs(len: *mut usize) -> *const ErlNifFunc {
    static TABLE: OnceLock<Tracer> = OnceLock::new();
    let table = catch_unwind(|| {
        &TABLE
            .get_or_init(|| {
                let funcs: Vec<ErlNifFunc> =
                    inventory::iter::<Nif>().map(Nif::get_def).filter(is_tracer_callback).collect();
                Tracer(Box::leak(funcs.into_boxed_slice()))
            })
            .0
    });
    let table: &[ErlNifFunc] = table.map(|t| &**t).unwrap_or(&[]);
    if !len.is_null() {
        // SAFETY: the caller passes a valid pointer to a usize.
        unsafe { *len = table.len() };
    }
    table.as_ptr()
}

/// Is `f` an erl_tracer callback (`enabled/3`, `trace/5`, vm/mod.rs)? They
/// are NIFs of the tracer modules (`dtrace`, `dyntrace`), through
/// `dtrace_erl_tracer_nifs`, not of `dtrace_nif`.
fn is_tracer_callback(f: &ErlNifFunc) -> bool {
    // SAFETY: registered names are NUL-terminated literals (raw_nif!).
    let name = unsafe { std::ffi::CStr::from_ptr(f.name) }.to_bytes();
    matches!((name, f.arity), (b"enabled", 3) | (b"trace", 5))
}

/// The leaked callback table; only read after it is built.
struct Tracer(&'static [ErlNifFunc]);

// SAFETY: built once inside OnceLock::get_or_init, read-only after; its
// pointers point to 'static data (function pointers, string literals).
unsafe impl Send for Tracer {}
// SAFETY: as above.
unsafe impl Sync for Tracer {}
