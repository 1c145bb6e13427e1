//! Function calls (the `call` and `arity` flags, with the patterns
//! `dtrace:function_probes/1` set): entries, returns and exceptions, told
//! apart as BIF, NIF, global or local calls by the table `dtrace_vm` gives
//! (`vm_call_probes/3`); and the function spans' calls
//! (`function_spans.rs`), which fire no function probe.

use std::sync::RwLock;

use rustler::sys::ErlNifTerm;
use rustler::types::atom::ok;
use rustler::{Atom, Env, Term};

use super::event::{Event, TraceTag, UNAVAILABLE, UNDEFINED, mfa_parts, mfa_text};
use super::function_spans;
use crate::probes::org_erlang_dyntrace::{function_call, function_exception, function_return};
use crate::probes::{
    bif__entry, bif__return, function__return, global__function__entry, local__function__entry, nif__entry, nif__return,
};
use crate::text::TextBuf;

mod atoms {
    rustler::atoms! { global, underscore = "_" }
}

/// The call-traced functions, as `dtrace_vm` set them: which probe a call
/// fires. Read on every call event; written when the patterns change.
#[derive(Default)]
struct CallTable {
    /// `{Module, Function | '_', Arity | -1, global | local}` patterns.
    patterns: Vec<(ErlNifTerm, Option<ErlNifTerm>, Option<u32>, bool)>,
    /// Call-traced BIFs, `{Module, Function, Arity}`.
    bifs: Vec<(ErlNifTerm, ErlNifTerm, u32)>,
    /// Call-traced NIFs (`Module:module_info(nifs)`), `{Module, Function, Arity}`.
    nifs: Vec<(ErlNifTerm, ErlNifTerm, u32)>,
}

static CALLS: RwLock<CallTable> = RwLock::new(CallTable { patterns: Vec::new(), bifs: Vec::new(), nifs: Vec::new() });

/// The most patterns, BIFs and NIFs the call table keeps.
const MAX_CALL_ENTRIES: usize = 4096;

/// `vm_call_probes(Patterns, Bifs, Nifs) -> ok`: `Patterns` is a list of
/// `{Module, Function | '_', Arity | '_', global | local}` (atoms, arity an
/// integer), `Bifs` and `Nifs` lists of `{Module, Function, Arity}`: a
/// call of a BIF fires `bif__entry`, of a NIF `nif__entry`, another call
/// `global__` or `local__function__entry` as its pattern says. Anything
/// malformed is left out.
#[rustler::nif]
fn vm_call_probes<'a>(env: Env<'a>, patterns: Term<'a>, bifs: Term<'a>, nifs: Term<'a>) -> Term<'a> {
    let mut table = CallTable::default();
    for_each_element(patterns, MAX_CALL_ENTRIES, |p| {
        if let Ok((m, f, a, kind)) = p.decode::<(Atom, Term, Term, Atom)>() {
            let f = f.decode::<Atom>().ok().filter(|&f| f != atoms::underscore());
            table.patterns.push((
                m.as_c_arg(),
                f.map(|f| f.as_c_arg()),
                a.decode::<u32>().ok(),
                kind == atoms::global(),
            ));
        }
    });
    for_each_element(bifs, MAX_CALL_ENTRIES, |b| {
        if let Ok((m, f, a)) = b.decode::<(Atom, Atom, u32)>() {
            table.bifs.push((m.as_c_arg(), f.as_c_arg(), a));
        }
    });
    for_each_element(nifs, MAX_CALL_ENTRIES, |n| {
        if let Ok((m, f, a)) = n.decode::<(Atom, Atom, u32)>() {
            table.nifs.push((m.as_c_arg(), f.as_c_arg(), a));
        }
    });
    if let Ok(mut calls) = CALLS.write() {
        *calls = table;
    }
    ok().to_term(env)
}

/// Calls `f` with the elements of a list, at most `max`, stopping at an
/// improper tail or at anything that is not a list.
fn for_each_element<'a>(list: Term<'a>, max: usize, mut f: impl FnMut(Term<'a>)) {
    let mut cell = list;
    for _ in 0..max {
        match cell.list_get_cell() {
            Ok((head, tail)) => {
                f(head);
                cell = tail;
            }
            Err(_) => return,
        }
    }
}

/// How a call of `{M, F, A}` is reported.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallKind {
    Bif,
    Nif,
    Global,
    Local,
}

/// `None`: a function traced only for function spans (no function probe).
fn call_kind(m: ErlNifTerm, f: ErlNifTerm, a: u32) -> Option<CallKind> {
    let Ok(calls) = CALLS.read() else { return Some(CallKind::Global) };
    if calls.bifs.iter().any(|&(bm, bf, ba)| bm == m && bf == f && ba == a) {
        return Some(CallKind::Bif);
    }
    if calls.nifs.iter().any(|&(nm, nf, na)| nm == m && nf == f && na == a) {
        return Some(CallKind::Nif);
    }
    match calls
        .patterns
        .iter()
        .find(|&&(pm, pf, pa, _)| pm == m && pf.is_none_or(|pf| pf == f) && pa.is_none_or(|pa| pa == a))
    {
        Some(p) => Some(if p.3 { CallKind::Global } else { CallKind::Local }),
        None if function_spans::is_span_function(m, f, a) => None,
        None => Some(CallKind::Global),
    }
}

/// `call`: the tracee calls TraceTerm (`{M, F, Arity}` with the arity
/// flag, or `{M, F, Args}`). OTP's `function_call` passes depth 0.
pub(crate) fn call(e: &Event<'_>, _tag: TraceTag) {
    let mut pid = TextBuf::new();
    let pid = e.tracee(&mut pid);
    if let Some((m, f, a)) = mfa_parts(e.term) {
        let mut mfa = TextBuf::new();
        match call_kind(m.as_c_arg(), f.as_c_arg(), a) {
            Some(CallKind::Bif) if bif__entry::enabled() => bif__entry::fire(pid, mfa.mfa(m, f, a)),
            Some(CallKind::Nif) if nif__entry::enabled() => nif__entry::fire(pid, mfa.mfa(m, f, a)),
            Some(CallKind::Global) if global__function__entry::enabled() => {
                global__function__entry::fire(pid, mfa.mfa(m, f, a), UNAVAILABLE)
            }
            Some(CallKind::Local) if local__function__entry::enabled() => {
                local__function__entry::fire(pid, mfa.mfa(m, f, a), UNAVAILABLE)
            }
            None => return,
            _ => {}
        }
    }
    if function_call::enabled() {
        let mut mfa = TextBuf::new();
        function_call::fire(pid, mfa_text(e.term, UNDEFINED, &mut mfa), 0);
    }
}

/// `return_from`, `exception_from`: TraceTerm `{M, F, Arity}` returns to
/// the tracee, or leaves it with an exception (extra: `{Class, Value}`).
/// OTP's `function_return` passes depth 0.
pub(crate) fn call_return(e: &Event<'_>, tag: TraceTag) {
    let mut pid = TextBuf::new();
    let pid = e.tracee(&mut pid);
    if let Some((m, f, a)) = mfa_parts(e.term) {
        let mut mfa = TextBuf::new();
        match call_kind(m.as_c_arg(), f.as_c_arg(), a) {
            Some(CallKind::Bif) if bif__return::enabled() => bif__return::fire(pid, mfa.mfa(m, f, a)),
            Some(CallKind::Nif) if nif__return::enabled() => nif__return::fire(pid, mfa.mfa(m, f, a)),
            Some(CallKind::Global | CallKind::Local) if function__return::enabled() => {
                function__return::fire(pid, mfa.mfa(m, f, a), UNAVAILABLE)
            }
            None => return,
            _ => {}
        }
    }
    let mut mfa = TextBuf::new();
    if tag == TraceTag::ExceptionFrom {
        if function_exception::enabled() {
            let mut class = TextBuf::new();
            let class = match e.extra().and_then(|x| x.decode::<(Term, Term)>().ok()) {
                Some((c, _)) => class.term(c),
                None => class.literal(UNDEFINED),
            };
            function_exception::fire(pid, mfa_text(e.term, UNDEFINED, &mut mfa), class);
        }
    } else if function_return::enabled() {
        function_return::fire(pid, mfa_text(e.term, UNDEFINED, &mut mfa), 0);
    }
}
