//! What every probe family's NIFs share: registration of the hot NIFs
//! without rustler's argument decoding, their arguments by name, the panic
//! barrier, and the library's load steps.
//!
//! The hot NIFs (a probe's disabled path, the erl_tracer callbacks) are
//! registered by hand ([`raw_nif!`]) rather than with `#[rustler::nif]`:
//! rustler's wrapper collects the arguments into a heap `Vec` and decodes
//! them before the body runs, while a disabled probe must return `false`
//! after reading one semaphore and nothing else. They read their arguments
//! through one named struct each ([`nif_args!`]). The cold NIFs (set-up and
//! status calls) are rustler's `#[rustler::nif]`, with typed arguments.
//!
//! Everything here goes through rustler's public API (`rustler::sys`, `Env`,
//! `Term`); the registration of raw NIFs (`raw_nif!`) and the library's
//! entry rest on two of its hidden items, and live in entry.rs, which
//! says why.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rustler::sys::{ErlNifEnv, ErlNifTerm, enif_raise_exception};
use rustler::{Env, Term};

use crate::atoms;

/// The C signature of a NIF.
pub(crate) type RawNif = unsafe extern "C" fn(*mut ErlNifEnv, c_int, *const ErlNifTerm) -> ErlNifTerm;

/// The most arguments a NIF of this library takes.
const MAX_ARITY: usize = 12;

/// The arguments of a raw NIF, by name: a struct declared with
/// [`nif_args!`], whose field order is the Erlang stub's argument order and
/// whose field count is the NIF's arity. `T` is `ErlNifTerm` (raw terms,
/// for checks before any decoding) or `Term<'a>`.
pub(crate) trait NifArgs<T>: Sized {
    /// The number of arguments: the NIF's arity.
    const ARITY: usize;
    /// The arguments, in order; `None` unless `args` has exactly ARITY.
    fn from_slice(args: &[T]) -> Option<Self>;
}

/// Declares a raw NIF's arguments as a struct of named fields, in the
/// order of the Erlang stub (`dtrace_nif.erl`), generic over the term
/// type: `nif_args!(I4s4Args { i1, i2, i3, i4, s1, s2, s3, s4, user_tag })`.
/// [`raw_nif!`] takes the NIF's arity from it, so the two cannot disagree.
macro_rules! nif_args {
    ($(#[$meta:meta])* $name:ident { $($field:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        pub(crate) struct $name<T> {
            $(pub(crate) $field: T,)*
        }
        impl<T: Copy> $crate::nif::NifArgs<T> for $name<T> {
            const ARITY: usize = [$(stringify!($field)),*].len();
            #[inline(always)]
            fn from_slice(args: &[T]) -> Option<Self> {
                match *args {
                    [$($field),*] => Some(Self { $($field),* }),
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use nif_args;

// `raw_nif!`, the registration of a raw NIF, rests on rustler's hidden
// items: it lives in entry.rs with the rest of that ground.
pub(crate) use crate::entry::raw_nif;

/// The arguments of a NIF that takes none.
pub(crate) struct NoArgs<T>(std::marker::PhantomData<T>);

impl<T> NifArgs<T> for NoArgs<T> {
    const ARITY: usize = 0;
    fn from_slice(args: &[T]) -> Option<Self> {
        args.is_empty().then_some(NoArgs(std::marker::PhantomData))
    }
}

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

    /// The raw terms, for comparisons with immediates before any decoding.
    #[inline(always)]
    fn raw_terms(&self) -> &[ErlNifTerm] {
        if self.argc == 0 || self.argv.is_null() {
            return &[];
        }
        // SAFETY: `argv` holds `argc` valid terms for the duration of the
        // call (NifCall::new), and the slice does not outlive `self`.
        unsafe { std::slice::from_raw_parts(self.argv, self.argc) }
    }

    /// Is the raw term `term` (an argument of this call) a port? One call
    /// into the VM, no decoding.
    #[inline(always)]
    pub(crate) fn is_port(&self, term: ErlNifTerm) -> bool {
        // SAFETY: `env` is this call's env and `term` one of its terms
        // (NifCall::new); the VM only reads it.
        unsafe { rustler::sys::enif_is_port(self.env, term) != 0 }
    }

    /// A 64-bit integer term, made in this call's env without the panic
    /// barrier of [`NifCall::run`] (nothing here can panic).
    #[inline(always)]
    pub(crate) fn int64(&self, value: i64) -> ErlNifTerm {
        // SAFETY: `env` is this call's env (NifCall::new); making an
        // integer term only allocates on its heap.
        unsafe { rustler::sys::enif_make_int64(self.env, value) }
    }

    /// The raw term `term` (an argument of this call) as a 64-bit integer,
    /// if it is one. One call into the VM.
    #[inline(always)]
    pub(crate) fn get_int64(&self, term: ErlNifTerm) -> Option<i64> {
        let mut value: i64 = 0;
        // SAFETY: `env` is this call's env and `term` one of its terms
        // (NifCall::new); the VM writes one i64 to a valid, owned pointer.
        (unsafe { rustler::sys::enif_get_int64(self.env, term, &mut value) } != 0).then_some(value)
    }

    /// The arguments as raw terms in their named struct (`None` only if
    /// the VM passed another arity than the one registered, which it does
    /// not).
    #[inline(always)]
    pub(crate) fn raw<A: NifArgs<ErlNifTerm>>(&self) -> Option<A> {
        A::from_slice(self.raw_terms())
    }

    /// Runs `body` with the call's env and arguments (read them with
    /// `A::from_slice`, `A` the NIF's [`nif_args!`] struct), turning a panic
    /// into the exception `error:nif_panicked` instead of letting it unwind
    /// into the VM. Raw NIFs are probe paths: `body` must not allocate on
    /// the heap (the `test-hooks` build counts it if it does).
    #[inline(always)]
    pub(crate) fn run(self, body: impl for<'a> FnOnce(Env<'a>, &[Term<'a>]) -> Term<'a>) -> ErlNifTerm {
        let scope = ();
        // SAFETY: `env` is the VM's env for this call (NifCall::new); the
        // Env does not outlive `scope`, which ends with this call.
        let env = unsafe { Env::new(&scope, self.env) };
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut terms = arrayvec::ArrayVec::<Term, MAX_ARITY>::new();
            for &raw in self.raw_terms().iter().take(MAX_ARITY) {
                // SAFETY: a valid term of `env` (NifCall::new).
                terms.push(unsafe { Term::new(env, raw) });
            }
            #[cfg(feature = "test-hooks")]
            let _counting = test_hooks::Counting::start();
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

/// The raw term's bits if it is an immediate (a local pid or port, an
/// atom, a small integer, `[]`): a value that names itself. The text `%T`
/// writes for it is the same for the life of the node, so `TextBuf::term` caches
/// it under those bits, and it takes no heap words (`flat_size`). ERTS's
/// primary tag, the two low bits of a term, is `11` for immediates and
/// only for them (erts/emulator/beam/erl_term.h, `TAG_PRIMARY_IMMED1`; so
/// in OTP 25 to 27 and long before). One AND instead of two calls into the
/// VM (`enif_term_type`, `enif_get_local_pid`). If ERTS ever changed it,
/// the worst outcome would be a wrong size or a stale cached text, never a
/// bad memory access: nothing is dereferenced on its word.
#[inline(always)]
pub(crate) fn immediate_bits(raw: ErlNifTerm) -> Option<usize> {
    // SAFETY: rustler declares ErlNifTerm `#[repr(transparent)]` over a
    // usize (ERL_NIF_UINT): the same bits, read by value.
    let bits = unsafe { std::mem::transmute::<ErlNifTerm, usize>(raw) };
    (bits & 0b11 == 0b11).then_some(bits)
}

/// The library's load steps, all of them, in order: the atoms and
/// immediates compared with, the declared-only probes' sites kept, each
/// family's tables (`efile`: errno atoms;
/// `vm`: trace tags; `provider`: its resource type), then DTrace's DOF.
/// The library's `load` and `upgrade` (entry.rs) both run it, so each step
/// is idempotent; `false` refuses the load.
pub(crate) fn load(env: Env<'_>, _info: Term<'_>) -> bool {
    let _ = (atoms::error(), atoms::badarg(), atoms::nif_panicked(), atoms::adopt());
    crate::args::init(env);
    crate::flat_size::load();
    // OTP's probes no event feeds keep their sites and notes (OTP's scripts
    // name them); fires nothing.
    crate::probes::keep_declared_sites();
    crate::lttng::load();
    #[cfg(unix)]
    let provider = crate::provider::nifs::load(env);
    #[cfg(not(unix))]
    let provider = true;
    let loaded = crate::efile::nifs::load(env) && crate::vm::load(env) && provider;
    if loaded {
        // Counted per module instance (load and upgrade); `entry.rs`'s
        // `unload` takes it back.
        crate::dof::load();
    }
    loaded
}

/// Hooks that only a test build (cargo feature `test-hooks`) has, for the
/// robustness suite: the NIFs `dtrace_nif:test_panic/0` (panics inside a
/// NIF body, to show it becomes `error:nif_panicked`),
/// `test_allocations/0` (the heap allocations made inside NIF bodies so
/// far, from a counting allocator) and `test_dof_force_active/0` (every
/// probe asks its DOF is-enabled site from then on, as once the DOF is
/// registered: for `make bench` on machines without DTrace's helper
/// device). Never in the library rebar3, mix or
/// make build, where the stubs of `dtrace_nif` answer
/// `{error, no_test_hooks}`.
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

    use rustler::Encoder;
    use rustler::sys::ErlNifTerm;

    use super::{NifCall, NoArgs, raw_nif};

    raw_nif!("test_panic", NoArgs => test_panic);
    raw_nif!("test_allocations", NoArgs => test_allocations);
    raw_nif!("test_dof_force_active", NoArgs => test_dof_force_active);

    /// `test_panic() -> no_return()`: panics inside a probe-path body.
    fn test_panic(call: NifCall) -> ErlNifTerm {
        call.run(|_env, _args| panic!("dtrace_nif built with feature test-hooks: test_panic/0 panics"))
    }

    /// `test_allocations() -> non_neg_integer()`: heap allocations made
    /// inside probe-path NIF bodies since the library loaded.
    fn test_allocations(call: NifCall) -> ErlNifTerm {
        call.run(|env, _args| IN_NIF_BODIES.load(Relaxed).encode(env))
    }

    /// `test_dof_force_active() -> ok`: from now on every probe's check
    /// also asks its DOF is-enabled site, as when the DOF is registered.
    fn test_dof_force_active(call: NifCall) -> ErlNifTerm {
        crate::dof::ACTIVE.store(true, Relaxed);
        call.run(|env, _args| rustler::types::atom::ok().encode(env))
    }
}
