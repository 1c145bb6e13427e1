//! Hooks that only a test build (cargo feature `test-hooks`) has, for the
//! robustness suite: the NIFs `dtrace_nif:test_panic/0` (panics inside a
//! NIF body, to show it becomes `error:nif_panicked`),
//! `test_allocations/0` (the heap allocations made inside NIF bodies so
//! far, from a counting allocator) and `test_dof_force_active/0` (every
//! probe asks its DOF is-enabled site from then on, as once the DOF is
//! registered: for `make bench` on machines without DTrace's helper
//! device) and `test_block/1` (sleeps in a system call on the normal
//! scheduler that runs it, as a NIF that blocks does: for "why was it
//! slow" down to the OS). Never in the library rebar3, mix or
//! make build; `dtrace_nif` has the functions only when compiled with
//! `TEST` (`scripts/test-hooks-build.sh`, rebar3's test profile), where
//! without this library its stubs answer `{error, no_test_hooks}`.

use std::sync::atomic::Ordering::Relaxed;

use rustler::Encoder;
use rustler::sys::ErlNifTerm;

use crate::alloc_count::IN_NIF_BODIES;
use crate::entry::raw_nif;
use crate::nif::{NifCall, NoArgs, nif_args};

nif_args!(BlockArgs { ms });

raw_nif!("test_panic", NoArgs => test_panic);
raw_nif!("test_block", BlockArgs => test_block);
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

/// `test_block(Ms) -> ok`: sleeps `Ms` milliseconds (0 to 10000) in the
/// kernel (`nanosleep`), holding the normal scheduler that runs it. Never
/// inlined: a stack read while it sleeps names it.
#[inline(never)]
fn test_block(call: NifCall) -> ErlNifTerm {
    let ms = call.raw::<BlockArgs<ErlNifTerm>>().and_then(|a| call.get_int64(a.ms));
    call.run(|env, _args| match ms {
        Some(ms @ 0..=10_000) => {
            std::thread::sleep(std::time::Duration::from_millis(ms.unsigned_abs()));
            rustler::types::atom::ok().encode(env)
        }
        _ => rustler::types::atom::error().encode(env),
    })
}
