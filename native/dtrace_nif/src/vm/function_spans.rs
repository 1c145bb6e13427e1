//! Function spans (`dtrace:function_spans/1`): each outermost call of a
//! named function is a span, fired on `span__begin`, `span__end` and
//! `span__slow` from the `call`, `return_from` and `exception_from` events
//! of the call-trace patterns `dtrace_vm` sets on those functions while a
//! span probe listens. For code that never calls `dtrace:span/2`.
//!
//! - Kind: the function as `m:f/arity`; user tag: none (NULL: the tracer
//!   callback cannot read the process's dictionary); outcome: `ok`, or the
//!   class of the exception that left the call.
//! - Outermost: a call of a function already open in the same process
//!   (recursion) is part of that span. A call of another named function
//!   inside one is a span of its own, its parent the enclosing one.
//! - Ids: bit 62 set and a counter, so they never meet the ids of
//!   `dtrace:span/2` (`erlang:unique_integer([positive])`, far below).
//! - Bounded: at most [`MAX_PROCESSES`] processes with an open span and
//!   [`MAX_DEPTH`] open spans per process; past that, no new span begins
//!   (a return with no open span of its function fires nothing). An entry
//!   left by a process that died inside a span is dropped when the table is
//!   full and the span is older than [`STALE_NS`], or when the functions
//!   change.
//! - The `span__vm_*` rows of automatic mode's own tracers fire only for a
//!   process with an open function span ([`inside`]).

use std::collections::HashMap;

use arrayvec::ArrayVec;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Mutex, RwLock};

use rustler::sys::ErlNifTerm;
use rustler::types::atom::ok;
use rustler::{Atom, Env, Term};

use super::event::{Event, TraceTag, mfa_parts};
use crate::probes::{Str, span__begin, span__end, span__slow};
use crate::term::immediate_bits;
use crate::text::TextBuf;

/// The most functions `function_spans/1` takes (`dtrace_vm` checks it too).
const MAX_FUNCTIONS: usize = 64;
/// The most processes with an open function span.
const MAX_PROCESSES: usize = 16_384;
/// The most open function spans in one process (distinct functions nested).
const MAX_DEPTH: usize = 8;
/// A span open this long (ns) is taken for one whose process died, when
/// the table is full.
const STALE_NS: i64 = 600_000_000_000;
/// Function span ids: this bit and a counter.
const ID_BIT: i64 = 1 << 62;

/// `{Module, Function, Arity}` of the named functions (atoms as raw terms:
/// atoms live as long as the VM).
static FUNCTIONS: RwLock<Vec<(ErlNifTerm, ErlNifTerm, u32)>> = RwLock::new(Vec::new());

/// One open span of a process.
struct Frame {
    function: (ErlNifTerm, ErlNifTerm, u32),
    /// Calls of the function open in it (recursion), at least 1.
    depth: u32,
    id: i64,
    parent: i64,
    begin_ns: i64,
}

/// The open spans of a process: no heap allocation per span.
type Frames = ArrayVec<Frame, MAX_DEPTH>;

/// The open spans per process (a local pid's term bits: an immediate).
/// A process's entry stays when its last span ends (no allocation per
/// span); entries with no open span go when the table is full.
static OPEN: Mutex<Option<HashMap<usize, Frames>>> = Mutex::new(None);

static NEXT_ID: AtomicI64 = AtomicI64::new(1);

mod atoms {
    rustler::atoms! { exit, throw }
}

/// `vm_function_spans(Functions) -> ok`: the functions whose outermost
/// calls are spans, `[{Module, Function, Arity}]` (at most 64; anything
/// malformed is left out). Every open span is forgotten.
#[rustler::nif]
fn vm_function_spans<'a>(env: Env<'a>, functions: Term<'a>) -> Term<'a> {
    let mut table = Vec::new();
    let mut cell = functions;
    while table.len() < MAX_FUNCTIONS {
        let Ok((head, tail)) = cell.list_get_cell() else { break };
        if let Ok((m, f, a)) = head.decode::<(Atom, Atom, u32)>() {
            table.push((m.as_c_arg(), f.as_c_arg(), a));
        }
        cell = tail;
    }
    if let Ok(mut open) = OPEN.lock() {
        *open = None;
    }
    if let Ok(mut functions) = FUNCTIONS.write() {
        *functions = table;
    }
    ok().to_term(env)
}

/// Is `{M, F, A}` a function span's function?
pub(super) fn is_span_function(m: ErlNifTerm, f: ErlNifTerm, a: u32) -> bool {
    FUNCTIONS.read().is_ok_and(|t| t.contains(&(m, f, a)))
}

/// Are functions named?
pub(super) fn named() -> bool {
    FUNCTIONS.read().is_ok_and(|t| !t.is_empty())
}

/// Has the process an open function span? (Cheap while none is named.)
pub(super) fn inside(pid: ErlNifTerm) -> bool {
    if !named() {
        return false;
    }
    let Some(key) = immediate_bits(pid) else { return false };
    OPEN.lock().is_ok_and(|open| open.as_ref().and_then(|o| o.get(&key)).is_some_and(|f| !f.is_empty()))
}

fn any_listens() -> bool {
    span__begin::enabled() || span__end::enabled() || span__slow::enabled()
}

/// Does an event of a traced process with `tag` feed function spans now?
/// (`enabled/3`: no feed row names them; `dtrace_vm` sets the `call` flag
/// and the patterns for them.)
pub(super) fn feeds(tag: TraceTag) -> bool {
    matches!(tag, TraceTag::Call | TraceTag::ReturnFrom | TraceTag::ExceptionFrom) && named() && any_listens()
}

/// A `call`, `return_from` or `exception_from` event of a process.
pub(super) fn event(e: &Event<'_>, tag: TraceTag) {
    let Some((m, f, a)) = mfa_parts(e.term) else { return };
    match tag {
        TraceTag::Call => call(e, m, f, a),
        TraceTag::ExceptionFrom => call_return(e, m, f, a, Some(e.extra())),
        _ => call_return(e, m, f, a, None),
    }
}

/// `call` of `{M, F, A}` in the tracee: begins a span if it is the
/// outermost open call of a named function.
fn call<'t>(e: &Event<'_>, m: Term<'t>, f: Term<'t>, a: u32) {
    let function = (m.as_c_arg(), f.as_c_arg(), a);
    if !is_span_function(function.0, function.1, a) {
        return;
    }
    let Some(key) = immediate_bits(e.tracee.as_c_arg()) else { return };
    let begun = {
        let Ok(mut guard) = OPEN.lock() else { return };
        let open = guard.get_or_insert_with(HashMap::new);
        let now = crate::span::now_ns();
        if !open.contains_key(&key) && open.len() >= MAX_PROCESSES {
            open.retain(|_, frames| frames.first().is_some_and(|f| now - f.begin_ns < STALE_NS));
            open.shrink_to_fit();
            if open.len() >= MAX_PROCESSES {
                return;
            }
        }
        let frames = open.entry(key).or_default();
        if let Some(frame) = frames.iter_mut().find(|fr| fr.function == function) {
            frame.depth = frame.depth.saturating_add(1);
            None
        } else if frames.is_full() {
            None
        } else {
            let id = ID_BIT | (NEXT_ID.fetch_add(1, Relaxed) & (ID_BIT - 1));
            let parent = frames.last().map_or(0, |fr| fr.id);
            frames.push(Frame { function, depth: 1, id, parent, begin_ns: now });
            Some((id, parent))
        }
    };
    // No let chains: Rust 1.85 (Debian 13's) builds this crate.
    if let Some((id, parent)) = begun {
        if span__begin::enabled() {
            let (mut pid, mut kind) = (TextBuf::new(), TextBuf::new());
            span__begin::fire(e.tracee(&mut pid), Str::NULL, id, parent, kind.mfa(m, f, a));
        }
    }
}

/// `return_from` or `exception_from` (`exception`: `Some` of the event's
/// extra, `{Class, Value}`) of `{M, F, A}`: ends the span when its
/// outermost call returns.
fn call_return<'t>(e: &Event<'_>, m: Term<'t>, f: Term<'t>, a: u32, exception: Option<Option<Term<'_>>>) {
    let function = (m.as_c_arg(), f.as_c_arg(), a);
    if !is_span_function(function.0, function.1, a) {
        return;
    }
    let Some(key) = immediate_bits(e.tracee.as_c_arg()) else { return };
    let ended = {
        let Ok(mut guard) = OPEN.lock() else { return };
        let Some(open) = guard.as_mut() else { return };
        let Some(frames) = open.get_mut(&key) else { return };
        let Some(at) = frames.iter().rposition(|fr| fr.function == function) else { return };
        frames[at].depth -= 1;
        if frames[at].depth > 0 {
            return;
        }
        // Spans opened inside it and never returned from (an exception
        // caught between them) end with it, unfired.
        let frame = frames.swap_remove(at);
        frames.truncate(at);
        frame
    };
    let duration = crate::span::now_ns() - ended.begin_ns;
    let outcome = Str::from_cstr(match exception.map(|x| x.and_then(|x| x.decode::<(Term, Term)>().ok())) {
        None => c"ok",
        Some(Some((c, _))) if atoms::exit() == c => c"exit",
        Some(Some((c, _))) if atoms::throw() == c => c"throw",
        Some(_) => c"error",
    });
    let (mut pid, mut kind) = (TextBuf::new(), TextBuf::new());
    let (pid, kind) = (e.tracee(&mut pid), kind.mfa(m, f, a));
    if span__end::enabled() {
        span__end::fire(pid, Str::NULL, ended.id, ended.parent, kind, duration, outcome);
    }
    if span__slow::enabled() && duration >= crate::span::slow_ns() {
        span__slow::fire(pid, Str::NULL, ended.id, ended.parent, kind, duration, outcome);
    }
}
