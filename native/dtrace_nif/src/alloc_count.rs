//! A counting global allocator for the robustness tests (cargo feature
//! `test-hooks` only): it counts the heap allocations made while a NIF
//! body runs ([`crate::nif::NifCall::run`] starts a [`Counting`]), which
//! `dtrace_nif:test_allocations/0` (test_hooks.rs) returns. Raw NIFs are
//! probe paths and must make none.

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
