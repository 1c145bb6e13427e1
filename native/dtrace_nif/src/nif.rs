//! What every probe family's NIFs share: registration without rustler's
//! argument decoding, the panic barrier, and the library's load steps.
//!
//! NIFs are registered by hand ([`raw_nif!`]) rather than with
//! `#[rustler::nif]`: rustler's wrapper collects the arguments into a heap
//! `Vec` and decodes them before the body runs, while a disabled probe must
//! return `false` after reading one semaphore and nothing else.
//!
//! Two `#[doc(hidden)]` items of rustler 0.39 are used here and in
//! entry.rs, because this is how its own `#[rustler::nif]` and
//! `rustler::init!` expansions do it: `rustler::Nif` (the registry entry
//! `rustler::init!` collects through `inventory`) and, in entry.rs,
//! `rustler::codegen_runtime`. rustler is pinned exactly (`=0.39.0`) for
//! that reason. To upgrade: compare the new version's `init!` and `nif`
//! expansions (rustler_codegen's `init.rs` and `nif.rs`) with `raw_nif!`
//! and entry.rs, then run `make test`: every NIF is called by the
//! contract suite, and dtrace_robust_SUITE's lifecycle case exercises the
//! `upgrade` callback.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rustler::sys::{ErlNifEnv, ErlNifTerm, enif_raise_exception};
use rustler::{Env, Term};

use crate::atoms;

/// The C signature of a NIF.
pub(crate) type RawNif = unsafe extern "C" fn(*mut ErlNifEnv, c_int, *const ErlNifTerm) -> ErlNifTerm;

/// The most arguments a NIF of this library takes.
const MAX_ARITY: usize = 12;

/// Registers the safe function `$body: fn(NifCall) -> ErlNifTerm` as
/// `dtrace:$name/$arity`, in the table `rustler::init!` (and entry.rs)
/// reads. The `extern "C"` wrapper is the only place that trusts the VM's
/// pointers. `, dirty_io` runs it on a dirty I/O scheduler (for NIFs that
/// do file I/O or wait for the dynamic loader's lock).
macro_rules! raw_nif {
    ($name:literal / $arity:literal => $body:ident, dirty_io) => {
        $crate::nif::raw_nif!(@ $name / $arity => $body, rustler::sys::ERL_NIF_DIRTY_JOB_IO_BOUND as _);
    };
    ($name:literal / $arity:literal => $body:ident) => {
        $crate::nif::raw_nif!(@ $name / $arity => $body, 0);
    };
    (@ $name:literal / $arity:literal => $body:ident, $flags:expr) => {
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
            inventory::submit!(rustler::Nif {
                name: concat!($name, "\0").as_ptr() as *const ::std::ffi::c_char,
                arity: $arity,
                flags: $flags,
                raw_func: nif as $crate::nif::RawNif,
            });
        };
    };
}
pub(crate) use raw_nif;

/// One NIF call: the env and arguments the VM passed.
pub(crate) struct NifCall {
    env: *mut ErlNifEnv,
    argc: usize,
    argv: *const ErlNifTerm,
}

impl NifCall {
    /// # Safety
    /// `env`, `argc` and `argv` are what the VM passed to the running NIF,
    /// and the value is used only during that call.
    #[inline(always)]
    pub(crate) unsafe fn new(env: *mut ErlNifEnv, argc: c_int, argv: *const ErlNifTerm) -> Self {
        Self { env, argc: usize::try_from(argc).unwrap_or(0), argv }
    }

    /// The raw term of argument `i`, for comparisons with immediates
    /// before any decoding; `None` past the arity.
    #[inline(always)]
    pub(crate) fn raw_arg(&self, i: usize) -> Option<ErlNifTerm> {
        // SAFETY: `i < argc`, and `argv` holds `argc` terms (NifCall::new).
        (i < self.argc).then(|| unsafe { *self.argv.add(i) })
    }

    /// Runs `body` with the call's env and arguments, turning a panic into
    /// the exception `error:nif_panicked` instead of letting it unwind into
    /// the VM. For probe paths: `body` must not allocate on the heap (the
    /// `test-hooks` build counts it if it does).
    #[inline(always)]
    pub(crate) fn run(self, body: impl for<'a> FnOnce(Env<'a>, &[Term<'a>]) -> Term<'a>) -> ErlNifTerm {
        self.run_with(true, body)
    }

    /// [`NifCall::run`] for NIFs that are not probe paths (set-up and
    /// status calls), which may allocate.
    #[inline(always)]
    pub(crate) fn run_allocating(self, body: impl for<'a> FnOnce(Env<'a>, &[Term<'a>]) -> Term<'a>) -> ErlNifTerm {
        self.run_with(false, body)
    }

    #[inline(always)]
    fn run_with(
        self,
        #[cfg_attr(not(feature = "test-hooks"), allow(unused_variables))] probe_path: bool,
        body: impl for<'a> FnOnce(Env<'a>, &[Term<'a>]) -> Term<'a>,
    ) -> ErlNifTerm {
        let scope = ();
        // SAFETY: `env` is the VM's env for this call (NifCall::new); the
        // Env does not outlive `scope`, which ends with this call.
        let env = unsafe { Env::new(&scope, self.env) };
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut terms = arrayvec::ArrayVec::<Term, MAX_ARITY>::new();
            for i in 0..self.argc.min(MAX_ARITY) {
                if let Some(raw) = self.raw_arg(i) {
                    // SAFETY: a valid term of `env` (NifCall::new).
                    terms.push(unsafe { Term::new(env, raw) });
                }
            }
            #[cfg(feature = "test-hooks")]
            let _counting = probe_path.then(test_hooks::Counting::start);
            body(env, &terms).as_c_arg()
        }));
        match result {
            Ok(term) => term,
            // SAFETY: raising an atom from a NIF, with the call's env, is
            // always valid; the NIF returns the value at once.
            Err(_) => unsafe { enif_raise_exception(self.env, atoms::nif_panicked().as_c_arg()) },
        }
    }
}

/// One step of the library's load: a family's set-up (atoms it compares
/// with, tables, resource types). Submitted with
/// `inventory::submit!(LoadStep(f))` next to the family's NIFs; `false`
/// refuses the load. Steps run on every load and upgrade of the library
/// (see entry.rs), so each must be idempotent.
pub(crate) struct LoadStep(pub fn(Env<'_>) -> bool);

inventory::collect!(LoadStep);

/// Runs every family's load step. The library's `load` and `upgrade`.
pub(crate) fn load(env: Env<'_>, _info: Term<'_>) -> bool {
    let _ = (atoms::error(), atoms::badarg(), atoms::nif_panicked(), atoms::adopt());
    crate::args::init(env);
    crate::lttng::load();
    inventory::iter::<LoadStep>().all(|step| (step.0)(env))
}

/// Hooks that only a test build (cargo feature `test-hooks`) has, for the
/// robustness suite: a panic on request (`dtrace:pn(-1000000)`) and a count
/// of heap allocations made inside NIF bodies (`dtrace:pn(-2000000)`
/// returns it). Never in the library rebar3, mix or make build.
#[cfg(feature = "test-hooks")]
pub(crate) mod test_hooks {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// Allocations made while a NIF body ran, on any scheduler.
    pub(crate) static IN_NIF_BODIES: AtomicU64 = AtomicU64::new(0);

    thread_local! {
        static INSIDE: Cell<bool> = const { Cell::new(false) };
    }

    /// Counts this thread's allocations while it lives.
    pub(crate) struct Counting;

    impl Counting {
        pub(crate) fn start() -> Self {
            INSIDE.set(true);
            Counting
        }
    }

    impl Drop for Counting {
        fn drop(&mut self) {
            INSIDE.set(false);
        }
    }

    struct CountingAlloc;

    // SAFETY: delegates to the system allocator; the counters are atomics
    // and a const-initialised thread-local Cell, which never allocate.
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if INSIDE.try_with(Cell::get).unwrap_or(false) {
                IN_NIF_BODIES.fetch_add(1, Relaxed);
            }
            // SAFETY: same contract as ours.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as ours.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;
}
