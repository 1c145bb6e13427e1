//! The span probes' NIFs: `span__begin` and `span__end` (not OTP's), behind
//! `dtrace:span/2`, `span_begin/1` and `span_end/1`.
//!
//! A span is a piece of work with a kind (`"db_query"`), an id unique on
//! the node, the id of the span it runs inside (0: none) and, at its end,
//! its duration in nanoseconds. Both probes have every argument in
//! arg0..arg5, so any bpftrace reads them directly. The Erlang side asks
//! `span_enabled/0` first (two semaphore reads) and runs the work untouched
//! while nobody listens.

use rustler::sys::ErlNifTerm;
use rustler::types::atom::{false_, true_};

use crate::args::{PidBuf, StrBuf, int64_or_zero};
use crate::nif::{NifCall, raw_nif};
use crate::probes::{span__begin, span__end};

raw_nif!("span_enabled" / 0 => span_enabled);
raw_nif!("span_begin" / 4 => span_begin);
raw_nif!("span_end" / 5 => span_end);

/// `span_enabled() -> boolean()`: is a tracer listening on `span__begin`
/// or `span__end`, in any sink?
fn span_enabled(_call: NifCall) -> ErlNifTerm {
    if span__begin::any_enabled() || span__end::any_enabled() { true_() } else { false_() }.as_c_arg()
}

/// `span_begin(SpanId, ParentId, Kind, UserTag) -> boolean()`: fires
/// `span__begin` with the calling process, if enabled. `Kind` and `UserTag`
/// are iolists (else NULL), the ids 64-bit integers (else 0).
fn span_begin(call: NifCall) -> ErlNifTerm {
    if !span__begin::any_enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let (mut pid, mut tag, mut kind) = (PidBuf::new(), StrBuf::new(), StrBuf::new());
        span__begin::emit(
            pid.self_pid(env),
            tag.iolist_or_null(args[3]),
            int64_or_zero(args[0]),
            int64_or_zero(args[1]),
            kind.iolist_or_null(args[2]),
        );
        true_().to_term(env)
    })
}

/// `span_end(SpanId, ParentId, Kind, DurationNs, UserTag) -> boolean()`:
/// fires `span__end` with the calling process, if enabled.
fn span_end(call: NifCall) -> ErlNifTerm {
    if !span__end::any_enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let (mut pid, mut tag, mut kind) = (PidBuf::new(), StrBuf::new(), StrBuf::new());
        span__end::emit(
            pid.self_pid(env),
            tag.iolist_or_null(args[4]),
            int64_or_zero(args[0]),
            int64_or_zero(args[1]),
            kind.iolist_or_null(args[2]),
            int64_or_zero(args[3]),
        );
        true_().to_term(env)
    })
}
