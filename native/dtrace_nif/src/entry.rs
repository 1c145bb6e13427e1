//! The ground this library stands on that rustler does not offer as
//! public API: everything built from rustler's `#[doc(hidden)]` items is
//! here, and only here.
//!
//! - [`raw_nif!`]: registers a hot NIF (a probe's disabled path, the
//!   erl_tracer callbacks) as a `rustler::Nif`, the registry entry
//!   `#[rustler::nif]` and `rustler::init!` use, but without
//!   `#[rustler::nif]`'s wrapper, which collects the arguments into a heap
//!   `Vec` and decodes them before the body runs, while a disabled probe
//!   must return `false` after reading one semaphore and nothing else.
//! - [`TracerCallback`]: the erl_tracer callbacks, registered apart, for
//!   the tracer modules' library (`dtrace_erl_tracer_nifs`).
//! - `nif_init`, the NIF library entry the VM looks up: what
//!   `rustler::init!("dtrace_nif", load = ...)` builds (the functions in
//!   rustler's registry, rustler's symbol set-up and resource
//!   registration, our `load`) plus an `upgrade` callback, which
//!   `rustler::init!` 0.39 cannot register, through `rustler::codegen_runtime`
//!   as `init!`'s own expansion does. Without one, the VM refuses the
//!   library to a new version of the `dtrace_nif` module while the old
//!   version is still loaded (`l(dtrace_nif)`, a relup, `code:load_file/1`):
//!   the new code's probes would return `false` for good. With it, the new
//!   code binds to the same loaded library: same semaphores, so attached
//!   tracers keep working.
//!
//! What rustler does offer is used as offered elsewhere: `#[rustler::nif]`
//! for the cold NIFs, `rustler::atoms!`, `rustler::sys`. One more thing is
//! done by hand, for the hot path: the run-time providers' resource type
//! (provider/nifs.rs) is opened with `enif_open_resource_type` rather than
//! `#[rustler::resource_impl]`, whose decode looks the type up in a
//! `TypeId`-keyed map on every call (as long again as a disabled probe)
//! and whose registration (rustler 0.39, `resource/registration.rs`) is
//! `ERL_NIF_RT_CREATE` from `load` only, so a new version of module
//! `dtrace_nif` could not take the type over (`ERL_NIF_RT_TAKEOVER`).
//!
//! rustler is pinned exactly (`=0.39.0`) for this module, and a unit test
//! (lib.rs, `rustler_ground`) fails when the locked version is not
//! [`crate::AUDITED_RUSTLER`]: before changing it, compare the new version's `init!`
//! and `nif` expansions (rustler_codegen's `init.rs` and `nif.rs`) and
//! `Nif`/`codegen_runtime` with what is here, then run `make test`: every
//! NIF is called by the contract suite, and dtrace_robust_SUITE's
//! lifecycle case exercises the `upgrade` callback.

/// Registers the safe function `$body: fn(NifCall) -> ErlNifTerm` as the
/// NIF `dtrace_nif:$name/N`, where N is the field count of the argument
/// struct `$args` ([`nif_args!`]), in the table `nif_init` (entry.rs) reads.
/// The `extern "C"` wrapper is the only place that trusts the VM's
/// pointers. `, dirty_io` runs it on a dirty I/O scheduler (for NIFs that
/// do file I/O or wait for the dynamic loader's lock). `tracer "name"`
/// registers an erl_tracer callback instead: a NIF of the tracer modules
/// (`dtrace`, `dyntrace`), in the table `dtrace_erl_tracer_nifs` (entry.rs)
/// hands their library, and not one of `dtrace_nif`.
macro_rules! raw_nif {
    (tracer $name:literal, $args:ident => $body:ident) => {
        $crate::entry::raw_nif!(@ $name, $args => $body, 0, |nif| $crate::entry::TracerCallback(nif));
    };
    ($name:literal, $args:ident => $body:ident, dirty_io) => {
        $crate::entry::raw_nif!(@ $name, $args => $body, rustler::sys::ERL_NIF_DIRTY_JOB_IO_BOUND as _, |nif| nif);
    };
    ($name:literal, $args:ident => $body:ident) => {
        $crate::entry::raw_nif!(@ $name, $args => $body, 0, |nif| nif);
    };
    (@ $name:literal, $args:ident => $body:ident, $flags:expr, |$nif:ident| $wrap:expr) => {
        const _: () = {
            unsafe extern "C" fn nif(
                env: *mut rustler::sys::ErlNifEnv,
                argc: ::std::ffi::c_int,
                argv: *const rustler::sys::ErlNifTerm,
            ) -> rustler::sys::ErlNifTerm {
                // SAFETY: the VM calls a NIF with its own env and `argc`
                // (the registered arity) valid terms at `argv`, for the
                // duration of the call; NifCall lives no longer.
                $body(unsafe { $crate::nif::NifCall::new(env, argc, argv) })
            }
            inventory::submit!({
                let $nif = rustler::Nif {
                    name: concat!($name, "\0").as_ptr() as *const ::std::ffi::c_char,
                    arity: <$args<rustler::sys::ErlNifTerm> as $crate::nif::NifArgs<rustler::sys::ErlNifTerm>>::ARITY as _,
                    flags: $flags,
                    raw_func: nif as $crate::nif::RawNif,
                };
                $wrap
            });
        };
    };
}
#[allow(unused_imports)]
pub(crate) use raw_nif;

/// The library's load, for `load` and `upgrade` alike: every registered
/// load step (load.rs), then, once they all succeeded, DTrace's DOF
/// (counted per module instance; `unload` takes it back). `false` refuses
/// the load.
pub(crate) fn load(env: rustler::Env<'_>, _info: rustler::Term<'_>) -> bool {
    let loaded = crate::load::run(env);
    if loaded {
        crate::dof::load();
    }
    loaded
}

/// An erl_tracer callback (`enabled/3`, `trace/5`, vm/mod.rs), registered
/// with `raw_nif!(tracer ...)`: a NIF of the tracer modules, collected
/// apart from `dtrace_nif`'s own NIFs (`rustler::Nif`), so that each
/// module's table is what was registered for it (entry.rs).
pub(crate) struct TracerCallback(pub rustler::Nif);

inventory::collect!(TracerCallback);

/// The library's entry and the tracer modules' table. Not on Windows,
/// where the VM passes its function table to `nif_init` and lib.rs uses
/// `rustler::init!` (without `upgrade`).
#[cfg(not(windows))]
mod library {
    use std::ffi::{c_int, c_void};
    use std::panic::catch_unwind;
    use std::ptr;
    use std::sync::OnceLock;

    use rustler::codegen_runtime::{ErlNifEntry, ErlNifEnv, ErlNifTerm, ResourceRegistration};
    use rustler::sys::ErlNifFunc;
    use rustler::{Env, Nif, Term};

    use super::TracerCallback;

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
                    // Every NIF of module dtrace_nif: raw_nif! and
                    // #[rustler::nif] register them as rustler::Nif (the
                    // erl_tracer callbacks are TracerCallback, not here).
                    let funcs: &'static [ErlNifFunc] = Box::leak(inventory::iter::<Nif>().map(Nif::get_def).collect());
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
            catch_unwind(|| ResourceRegistration::register_all_collected(env).is_ok() && super::load(env, info));
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
        if matches!(catch_unwind(|| super::load(env, info)), Ok(true)) { 0 } else { 1 }
    }

    /// An instance of module `dtrace_nif` is purged: the last one using the
    /// library takes its DOF back from DTrace's helper device (`dof::unload`),
    /// before the VM may unload the library's code.
    unsafe extern "C" fn unload(_env: *mut ErlNifEnv, _priv: *mut c_void) {
        let _ = catch_unwind(crate::dof::unload);
    }

    /// The erl_tracer callbacks (`enabled/3`, `trace/5`) as NIF functions, for
    /// the library of the tracer modules `dtrace_tracer` and `dyntrace`
    /// (`native/tracer_nif`): its entry lists these, so `{tracer,
    /// dtrace_tracer, []}` and `{tracer, dyntrace, []}` fire the probes of
    /// this library. Writes the
    /// number of entries to `len` and returns a table that lives as long as
    /// this library.
    #[unsafe(no_mangle)]
    pub extern "C" fn dtrace_erl_tracer_nifs(len: *mut usize) -> *const ErlNifFunc {
        static TABLE: OnceLock<Tracer> = OnceLock::new();
        let table = catch_unwind(|| {
            &TABLE
                .get_or_init(|| {
                    let funcs: Vec<ErlNifFunc> =
                        inventory::iter::<TracerCallback>().map(|callback| callback.0.get_def()).collect();
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

    /// The leaked callback table; only read after it is built.
    struct Tracer(&'static [ErlNifFunc]);

    // SAFETY: built once inside OnceLock::get_or_init, read-only after; its
    // pointers point to 'static data (function pointers, string literals).
    unsafe impl Send for Tracer {}
    // SAFETY: as above.
    unsafe impl Sync for Tracer {}
}
