//! The span probes' NIFs: `span__begin`, `span__end` and `span__slow` (not
//! OTP's), behind `dtrace:span/2`, `span_begin/1` and `span_end/1`.
//!
//! A span is a piece of work with a kind (`"db_query"`), an id unique on
//! the node, the id of the span it runs inside (0: none) and, at its end,
//! its duration in nanoseconds. The probes have every argument in
//! arg0..arg5, so any bpftrace reads them directly. The Erlang side asks
//! `span_enabled/0` first (a load per probe and sink) and runs the work
//! untouched while nobody listens.
//!
//! `span__slow` fires at a span's end only when it lasted at least the
//! node's slow-span threshold (`SLOW_NS`, default 1 ms: the "longer than 1
//! millisecond" of the Erlang DTrace talk's function-call script). While it
//! is the only span probe that listens (the flight recorder's always-on
//! default), a span is two reads of `CLOCK_MONOTONIC` here and a
//! comparison: `span_enabled/0` returns the begin time and
//! `span_slow_end/1` the duration if it is over the threshold, and only
//! then does `span_slow/6` format and fire anything. This is JFR's way of
//! staying on: duration events below a threshold are never written.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use rustler::Term;
use rustler::sys::ErlNifTerm;
use rustler::types::atom::{false_, true_};

use crate::args::{StrBuf, int64_or_zero};
use crate::atoms;
use crate::entry::raw_nif;
use crate::nif::{NifArgs, NifCall, NoArgs, nif_args};
use crate::probes::{Str, span__begin, span__end, span__slow};
use crate::text::TextBuf;

raw_nif!("span_enabled", NoArgs => span_enabled);
raw_nif!("span_begin", BeginArgs => span_begin);
raw_nif!("span_end", EndArgs => span_end);
raw_nif!("span_slow_end", SlowEndArgs => span_slow_end);
raw_nif!("span_slow", EndArgs => span_slow);

/// The node's slow-span threshold in nanoseconds: `span__slow` fires for
/// spans at least this long. Set by `dtrace:slow_span_threshold/1`.
static SLOW_NS: AtomicI64 = AtomicI64::new(1_000_000);

/// The least [`SLOW_NS`] can be set to.
const MIN_SLOW_NS: i64 = 1;

nif_args!(
    /// `span_begin(SpanId, ParentId, Kind, UserTag)`.
    BeginArgs { span_id, parent_id, kind, user_tag }
);
nif_args!(
    /// `span_end(SpanId, ParentId, Kind, DurationNs, UserTag, Outcome)`.
    EndArgs { span_id, parent_id, kind, duration_ns, user_tag, outcome }
);
nif_args!(
    /// `span_slow_end(BeginNs)`.
    SlowEndArgs { begin_ns }
);

/// `CLOCK_MONOTONIC` in nanoseconds (the clock of `span_enabled/0`'s begin
/// times; not ERTS's monotonic time, which is offset and corrected, so the
/// two are never mixed: a span begun here ends in `span_slow_end/1`).
pub(crate) fn now_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec to a valid, owned pointer;
    // CLOCK_MONOTONIC exists on every Linux and BSD (vDSO on Linux).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    // time_t and long are i64 on the LP64 targets built here; the casts
    // keep narrower ones working.
    #[allow(clippy::unnecessary_cast)]
    let (sec, nsec) = (ts.tv_sec as i64, ts.tv_nsec as i64);
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// `span_enabled() -> boolean() | integer()`: `true` when a tracer listens
/// on `span__begin` or `span__end`, in any sink (a full span: both fire, and
/// `span__slow` too at the end if it listens); else, while one listens on
/// `span__slow` only, the begin time in nanoseconds of `CLOCK_MONOTONIC`,
/// for `span_slow_end/1`; else `false`.
fn span_enabled(call: NifCall) -> ErlNifTerm {
    if span__begin::enabled() || span__end::enabled() {
        return true_().as_c_arg();
    }
    if !span__slow::enabled() {
        return false_().as_c_arg();
    }
    call.int64(now_ns())
}

/// `span_slow_end(BeginNs) -> false | DurationNs`: the nanoseconds since
/// `BeginNs` (a begin time `span_enabled/0` returned) when they are at least
/// the slow-span threshold and a tracer listens on `span__slow`; `false`
/// otherwise (and for anything that is not an integer).
fn span_slow_end(call: NifCall) -> ErlNifTerm {
    let now = now_ns();
    let Some(a) = call.raw::<SlowEndArgs<ErlNifTerm>>() else { return false_().as_c_arg() };
    let Some(begin) = call.get_int64(a.begin_ns) else { return false_().as_c_arg() };
    let duration = now.saturating_sub(begin);
    if duration >= SLOW_NS.load(Relaxed) && span__slow::enabled() { call.int64(duration) } else { false_().as_c_arg() }
}

/// `span_slow(SpanId, ParentId, Kind, DurationNs, UserTag, Outcome) -> boolean()`:
/// fires `span__slow` with the calling process, if enabled (the caller
/// compared the duration with the threshold: `span_slow_end/1`).
fn span_slow(call: NifCall) -> ErlNifTerm {
    if !span__slow::enabled() {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let Some(a) = EndArgs::from_slice(args) else { return false_().to_term(env) };
        fire_end_like(env, a, span__slow::fire);
        true_().to_term(env)
    })
}

/// `span__end`'s arguments (which `span__slow` shares) from `a`, with the
/// calling process, handed to `fire`: `span__end::fire` or `span__slow::fire`.
fn fire_end_like<'a>(env: rustler::Env<'a>, a: EndArgs<Term<'a>>, fire: EndFire) {
    let (mut pid, mut tag, mut kind) = (TextBuf::new(), StrBuf::new(), StrBuf::new());
    fire(
        pid.self_pid(env),
        tag.iolist_or_null(a.user_tag),
        int64_or_zero(a.span_id),
        int64_or_zero(a.parent_id),
        kind.iolist_or_null(a.kind),
        int64_or_zero(a.duration_ns),
        outcome_str(a.outcome),
    );
}

/// The generated `fire` of a probe with `span__end`'s layout.
type EndFire = for<'x> fn(Str<'x>, Str<'x>, i64, i64, Str<'x>, i64, Str<'x>);

/// The `outcome` argument of `span__end` and `span__slow`: `"error"`,
/// `"exit"` or `"throw"` for those atoms (the class of the exception the
/// span raised), `"ok"` for anything else (the Erlang side passes `ok` or
/// a class; never NULL, so a script's `copyinstr` always has a string).
fn outcome_str(term: Term<'_>) -> Str<'static> {
    let text = if atoms::error() == term {
        c"error"
    } else if atoms::exit() == term {
        c"exit"
    } else if atoms::throw() == term {
        c"throw"
    } else {
        c"ok"
    };
    Str::from_cstr(text)
}

/// The node's slow-span threshold in nanoseconds (for function spans,
/// `vm/function_spans.rs`).
pub(crate) fn slow_ns() -> i64 {
    SLOW_NS.load(Relaxed)
}

/// `slow_span_threshold() -> Ns`: the node's slow-span threshold.
#[rustler::nif]
fn slow_span_threshold() -> i64 {
    SLOW_NS.load(Relaxed)
}

/// `set_slow_span_threshold(Ns) -> OldNs`: sets it (at least 1 ns; a
/// non-integer or a smaller one raises `badarg`).
#[rustler::nif]
fn set_slow_span_threshold(ns: i64) -> rustler::NifResult<i64> {
    if ns < MIN_SLOW_NS {
        return Err(rustler::Error::BadArg);
    }
    Ok(SLOW_NS.swap(ns, Relaxed))
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

/// `span_end(SpanId, ParentId, Kind, DurationNs, UserTag, Outcome) ->
/// boolean()`: fires `span__end` with the calling process, if enabled, and
/// `span__slow` if it listens and `DurationNs` is at least the threshold.
/// `true` when `span__end` fired.
fn span_end(call: NifCall) -> ErlNifTerm {
    let (end, slow) = (span__end::enabled(), span__slow::enabled());
    if !end && !slow {
        return false_().as_c_arg();
    }
    call.run(|env, args| {
        let Some(a) = EndArgs::from_slice(args) else { return false_().to_term(env) };
        if end {
            fire_end_like(env, a, span__end::fire);
        }
        if slow && int64_or_zero(a.duration_ns) >= SLOW_NS.load(Relaxed) {
            fire_end_like(env, a, span__slow::fire);
        }
        if end { true_() } else { false_() }.to_term(env)
    })
}
