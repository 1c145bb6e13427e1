//! `dtrace_nif`: Erlang/OTP's dynamic-trace probes (provider `erlang`) as
//! USDT/SDT probes in a NIF, so that bpftrace, perf, gdb, SystemTap and
//! DTrace see them on any stock BEAM.
//!
//! The catalogue of probes is one D provider file, `probes.d`; build.rs
//! generates the probe sites, semaphores and is-enabled checks from it
//! ([`probes`]). The data path, from an Erlang call to a probe:
//! `dtrace:p/N` (argument routing, in Erlang) → one NIF per probe family
//! (`user.rs`, `efile.rs`) → semaphore check ([`probes`]) → conversion into
//! stack buffers ([`args`]) → the probe site ([`probes`]).
//!
//! File I/O: `dtrace_file:F` asks `dtrace:efile_enabled/0` (four semaphore
//! reads) and calls `file:F` directly, or brackets it with the NIFs of
//! `efile.rs`, which fire OTP's `efile_drv__*` probes.
#![deny(clippy::undocumented_unsafe_blocks)]
// Without the NIFs, most sites have no caller.
#![cfg_attr(feature = "sites-only", allow(dead_code))]

pub mod args;
mod atoms;
pub mod errno;
// The LTTng-UST sink (its tracepoints are read by the generated probes).
mod lttng;
pub mod probes;
#[cfg(unix)]
pub mod provider;
pub mod sdt_object;

// The probe families: each registers its own NIFs and load step. Their
// NIFs (and the shared plumbing in nif.rs) are left out of unit-test
// builds and of the `sites-only` feature: they reference the VM's enif_*
// functions, which only exist once the VM loads the library; the unit
// tests and native programs never call into the VM.
pub mod efile;
#[cfg(not(any(test, feature = "sites-only")))]
mod nif;
#[cfg(not(any(test, feature = "sites-only")))]
mod span;
#[cfg(not(any(test, feature = "sites-only")))]
mod user;
// The VM's own probes, from erl_tracer callbacks; text and message sizes
// for them.
#[cfg(not(any(test, feature = "sites-only")))]
mod flat_size;
#[cfg(not(any(test, feature = "sites-only")))]
mod text;
#[cfg(not(any(test, feature = "sites-only")))]
mod vm;

// `nif_init`: rustler's entry plus an `upgrade` callback (see entry.rs).
#[cfg(not(any(test, windows, feature = "sites-only")))]
mod entry;
// On Windows the VM passes its function table to `nif_init`; rustler's own
// entry does that (without `upgrade`: reloading module dtrace there needs a
// purge first).
#[cfg(all(windows, not(any(test, feature = "sites-only"))))]
rustler::init!("dtrace", load = nif::load);
