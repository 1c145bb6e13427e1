//! The span probes' NIFs: `span__begin` and `span__end` (not OTP's), behind
//! `dtrace:span/2`, `span_begin/1` and `span_end/1`.
//!
//! A span is a piece of work with a kind (`"db_query"`), an id unique on
//! the node, the id of the span it runs inside (0: none) and, at its end,
//! its duration in nanoseconds. Both probes have every argument in
//! arg0..arg5, so any bpftrace reads them directly. The Erlang side asks
//! `span_enabled/0` first (a load per probe and sink) and runs the work
//! untouched while nobody listens.

use rustler::sys::ErlNifTerm;
use rustler::types::atom::{false_, true_};

use crate::args::{StrBuf, int64_or_zero};
use crate::nif::{NifArgs, NifCall, NoArgs, nif_args, raw_nif};
use crate::probes::{span__begin, span__end};
use crate::text::TextBuf;

raw_nif!("span_enabled", NoArgs => span_enabled);
raw_nif!("span_begin", BeginArgs => span_begin);
raw_nif!("span_end", EndArgs => span_end);

nif_args!(
    /// `span_begin(SpanId, ParentId, Kind, UserTag)`.
    BeginArgs { span_id, parent_id, kind, user_tag }
);
nif_args!(
    /// `span_end(SpanId, ParentId, Kind, DurationNs, UserTag)`.
    EndArgs { span_id, parent_id, kind, duration_ns, user_tag }
);

/// `span_enabled() -> boolean()`: is a tracer listening on `span__begin`
/// or `span__end`, in any sink?
fn span_enabled(_call: NifCall) -> ErlNifTerm {
    if span__begin::enabled() || span__end::enabled() { true_() } else { false_() }.as_c_arg()
}

/// `span_begin(SpanId, ParentId, Kind, UserTag) -> boolean()`: fires
/// `span__begin` with the calling process, if enabled. `Kind` and `UserTag`
/// are iolists (else NULL), the ids 64-bit integers (else 0).
fn span_begin(call: NifCall) -> ErlNifTerm {
    if !span__begin::enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let Some(a) = BeginArgs::from_slice(args) else { return false_().to_term(env) };
        let (mut pid, mut tag, mut kind) = (TextBuf::new(), StrBuf::new(), StrBuf::new());
        span__begin::fire(
            pid.self_pid(env),
            tag.iolist_or_null(a.user_tag),
            int64_or_zero(a.span_id),
            int64_or_zero(a.parent_id),
            kind.iolist_or_null(a.kind),
        );
        true_().to_term(env)
    })
}

/// `span_end(SpanId, ParentId, Kind, DurationNs, UserTag) -> boolean()`:
/// fires `span__end` with the calling process, if enabled.
fn span_end(call: NifCall) -> ErlNifTerm {
    if !span__end::enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let Some(a) = EndArgs::from_slice(args) else { return false_().to_term(env) };
        let (mut pid, mut tag, mut kind) = (TextBuf::new(), StrBuf::new(), StrBuf::new());
        span__end::fire(
            pid.self_pid(env),
            tag.iolist_or_null(a.user_tag),
            int64_or_zero(a.span_id),
            int64_or_zero(a.parent_id),
            kind.iolist_or_null(a.kind),
            int64_or_zero(a.duration_ns),
        );
        true_().to_term(env)
    })
}
