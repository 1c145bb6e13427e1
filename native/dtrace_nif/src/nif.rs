//! What every probe family's NIFs share: their arguments by name and the
//! panic barrier. A leaf: it names no family (the load steps are in
//! load.rs, registered by each family).
//!
//! The hot NIFs (a probe's disabled path, the erl_tracer callbacks) are
//! registered by hand ([`raw_nif!`](crate::entry::raw_nif)) rather than with `#[rustler::nif]`:
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
/// [`raw_nif!`](crate::entry::raw_nif) takes the NIF's arity from it, so the two cannot disagree.
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
            let _counting = crate::alloc_count::Counting::start();
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
