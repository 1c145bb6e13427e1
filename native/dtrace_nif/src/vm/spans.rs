//! A process inside a span (the `on=spans` rows: tracer state `span`,
//! flags set by `dtrace:span/2` on its own process for the outermost span
//! while one of these probes listens): the `span__vm_*` probes, for "why
//! was it slow" (priv/python/dtrace_tools/why.py). Each fires only its own probe.
//!
//! The same rows on processes (`auto=no`) take the events of the legacy
//! tracer `{dtrace_tracer, []}`: without sessions (OTP 25, 26) a process that
//! automatic mode already traces keeps that tracer, and its span adds its
//! flags to it. They fire for every process that tracer has then; the
//! consumers keep the events of processes inside a span. Automatic mode's
//! own session (OTP 27, state `auto`) is skipped: there the span session
//! has the process's events (but GC's on OTP 27.0 to 29.1.1 when automatic
//! mode traces the process for it: the span then leaves GC to automatic mode,
//! `dtrace_gc_guard.erl`, and `span__vm_gc` is silent for it).
//!
//! Function spans (`function_spans.rs`) have no code to set flags at their
//! begin: while functions are named and one of these probes listens,
//! automatic mode sets these rows' flags on every process, and the rows
//! of its tracers (`auto`, and `[]` then) fire only for a process with an
//! open function span.

use rustler::TermType;

use super::event::{Event, TraceTag, UNAVAILABLE, UNKNOWN_MFA, mfa_text};
use super::function_spans;
use crate::flat_size::flat_size;
use crate::probes::{span__vm_gc, span__vm_receive, span__vm_scheduled, span__vm_send};
use crate::text::TextBuf;

/// Is the event one of a process inside a span: the span tracer's (`span`),
/// or automatic mode's (`auto`, `[]`) for a process inside a function
/// span; `[]`'s for any process while no function is named (module doc).
fn wanted(e: &Event<'_>) -> bool {
    if e.span_state() {
        true
    } else if e.auto_session() || function_spans::named() {
        function_spans::inside(e.tracee.as_c_arg())
    } else {
        true
    }
}

/// `in`, `out`: the tracee runs (in) or stops running (out) in TraceTerm's mfa.
pub(crate) fn span_scheduled(e: &Event<'_>, _tag: TraceTag) {
    if !wanted(e) {
        return;
    }
    let (mut pid, mut mfa, mut kind) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    span__vm_scheduled::fire(e.tracee(&mut pid), mfa_text(e.term, UNKNOWN_MFA, &mut mfa), e.tag_name(&mut kind));
}

/// `gc_minor_start` .. `gc_major_end`: the words needed or reclaimed.
pub(crate) fn span_gc(e: &Event<'_>, _tag: TraceTag) {
    if !wanted(e) {
        return;
    }
    let (mut pid, mut kind) = (TextBuf::new(), TextBuf::new());
    let words = super::gc::wordsize(e.term).map_or(UNAVAILABLE, |w| w as i64);
    span__vm_gc::fire(e.tracee(&mut pid), e.tag_name(&mut kind), words);
}

/// `send`, `send_to_non_existing_process`: to `extra`, as given to the
/// send (a registered name is not resolved here).
pub(crate) fn span_send(e: &Event<'_>, _tag: TraceTag) {
    if !wanted(e) {
        return;
    }
    let (mut pid, mut to) = (TextBuf::new(), TextBuf::new());
    let to = match e.extra() {
        Some(t) => e.id(t, &mut to),
        None => to.literal(""),
    };
    let size = flat_size(e.term).map_or(UNAVAILABLE, |s| s as i64);
    span__vm_send::fire(e.tracee(&mut pid), to, size);
}

/// `'receive'` on a process: a message was queued to it.
pub(crate) fn span_receive(e: &Event<'_>, _tag: TraceTag) {
    if !wanted(e) {
        return;
    }
    if e.tracee.get_type() == TermType::Port {
        return;
    }
    let mut pid = TextBuf::new();
    let size = flat_size(e.term).map_or(UNAVAILABLE, |s| s as i64);
    span__vm_receive::fire(e.tracee(&mut pid), size);
}
