//! `dtrace_nif`: Erlang/OTP's dynamic-trace user probes (provider `erlang`)
//! as USDT/SDT probes in a NIF, so that bpftrace, perf, gdb, SystemTap and
//! DTrace see them on any stock BEAM.
//!
//! The data path, from an Erlang call to a probe:
//! `dtrace:p/N` (argument routing, in Erlang) → one NIF per probe family
//! ([`nifs`]) → semaphore check ([`probes`]) → conversion into stack buffers
//! ([`args`]) → the probe site ([`probes`]).

pub mod args;
mod atoms;
mod nifs;
pub mod probes;

rustler::init!("dtrace", load = nifs::load);
