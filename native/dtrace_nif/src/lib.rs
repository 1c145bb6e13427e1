//! `dtrace_nif`: Erlang/OTP's dynamic-trace probes (provider `erlang`) as
//! USDT/SDT probes and LTTng-UST events in a NIF, so that bpftrace, perf,
//! gdb, SystemTap and LTTng see them on any stock BEAM.
//!
//! The catalogue of probes is one D provider file, `probes.d`; build.rs
//! generates the probes, their LTTng events and the VM feed table from it
//! ([`probes`]). The data path, from an Erlang call to a probe:
//! `dtrace:p/N` (argument routing, in Erlang) → one NIF per probe family
//! (`dtrace_nif:i4s4/9`; `user.rs`, `span.rs`, `efile.rs`, `provider/nifs.rs`)
//! → semaphore check ([`probes`]) → conversion into stack buffers
//! ([`args`], `text.rs`) → the probe (`fire`, every sink that listens). A
//! VM event: erl_tracer → `vm/mod.rs` (`enabled/3`, `trace/5`) → the feed
//! table's formatting function (`vm/*.rs`) → the probes. ARCHITECTURE.md
//! walks each path.
//!
//! The NIFs belong to the private Erlang module `dtrace_nif`; the erl_tracer
//! callbacks are also exported as a table (`dtrace_erl_tracer_nifs`) for
//! the tracer modules `dtrace_tracer` and `dyntrace` (`native/tracer_nif`).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod args;
mod atoms;
// DTrace's own registration: the catalogue as DOF, for the helper device.
pub mod dof;
pub mod errno;
// The LTTng-UST sink (its tracepoints are read by the generated probes).
mod lttng;
pub mod probes;
#[cfg(unix)]
pub mod provider;
pub mod sdt_object;

// The probe families: each registers its own NIFs and load step
// (load.rs). Their
// NIFs (and the shared plumbing in nif.rs) are left out of unit-test
// builds: they reference the VM's enif_* functions, which only exist once
// the VM loads the library; the unit tests never call into the VM.
pub mod efile;
#[cfg(not(test))]
mod flat_size;
#[cfg(not(test))]
mod nif;
// The load steps each family registers, run by entry.rs.
#[cfg(not(test))]
mod load;
// What a raw term's bits say (leaf).
#[cfg(not(test))]
mod term;
// The robustness tests' NIFs and counting allocator (feature test-hooks).
#[cfg(all(not(test), feature = "test-hooks"))]
mod alloc_count;
#[cfg(all(not(test), feature = "test-hooks"))]
mod test_hooks;
// The names ports were opened with, for the VM's port probes (pure Rust:
// unit-tested).
mod port_names;
// The code in a process dump, for dtrace_message__send_code (pure Rust:
// unit-tested).
mod process_dump;
#[cfg(not(test))]
mod span;
#[cfg(not(test))]
mod text;
#[cfg(not(test))]
mod user;
#[cfg(not(test))]
mod vm;

// The ground resting on rustler's hidden items: `raw_nif!` and `nif_init`,
// rustler's entry plus an `upgrade` callback (see entry.rs).
#[cfg(not(test))]
mod entry;

/// No circles among the crate's modules beyond the known ones.
#[cfg(test)]
mod layering;

/// The rustler version entry.rs, the code resting on rustler's hidden
/// items, was checked against.
pub const AUDITED_RUSTLER: &str = "0.39.0";

/// Fails when the rustler in `Cargo.lock` is not the one entry.rs was
/// checked against: an upgrade must re-read rustler's `init!` and `nif`
/// expansions first (entry.rs says how), then change [`AUDITED_RUSTLER`].
#[cfg(test)]
mod rustler_ground {
    #[test]
    fn locked_rustler_is_the_audited_one() {
        let lock_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock");
        let lock = std::fs::read_to_string(lock_path).expect("Cargo.lock");
        let version = lock
            .split("[[package]]")
            .find(|p| p.lines().any(|l| l.trim() == "name = \"rustler\""))
            .and_then(|p| p.lines().find_map(|l| l.trim().strip_prefix("version = \"")))
            .map(|v| v.trim_end_matches('"'))
            .expect("rustler in Cargo.lock");
        assert_eq!(
            version,
            super::AUDITED_RUSTLER,
            "rustler {version} is locked, entry.rs was checked against {}: read entry.rs's module doc",
            super::AUDITED_RUSTLER
        );
    }
}
// On Windows the VM passes its function table to `nif_init`; rustler's own
// entry does that (without `upgrade`: reloading module dtrace_nif there
// needs a purge first).
#[cfg(all(windows, not(test)))]
rustler::init!("dtrace_nif", load = entry::load);
