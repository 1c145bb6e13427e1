//! What every formatting function of the VM feed reads: the event
//! erl_tracer passed (`Event`), its trace tag and target (generated from
//! the feed table, `trace_tags.rs`), and the text OTP gives for an mfa or
//! a link. A leaf of `vm`: the formatting functions depend on it, and it on
//! none of them.

use rustler::{Env, Term, TermType};

use crate::probes::Str;
use crate::text::TextBuf;

include!(concat!(env!("OUT_DIR"), "/trace_tags.rs"));

/// The atoms of the VM feed (one set: rustler makes a set's atoms at its
/// first use, which allocates, so every probe path after the first finds them).
pub(super) mod atoms {
    rustler::atoms! {
        trace, discard, trace_status, extra, spawn_meta, span, auto, undefined, node_monitor, system_monitor, exit_meta,
    }
}

/// What erl_tracer passes to `trace/5`.
pub(crate) struct Event<'a> {
    pub(super) env: Env<'a>,
    /// The trace tag (`send`, `in_exiting`, ...).
    pub(super) trace_tag: Term<'a>,
    /// The tracer's state (`[]`, `auto`, `span`, `spawn_meta`).
    pub(super) tracer_state: Term<'a>,
    /// The traced process or port.
    pub(super) tracee: Term<'a>,
    /// What the event carries (the message, the new pid, the mfa, ...).
    pub(super) term: Term<'a>,
    /// The options map (`extra`, ...).
    pub(super) opts: Term<'a>,
}

/// The mfa text OTP's SDT probes give when the VM does not know the function.
pub(super) const UNKNOWN_MFA: &str = "<unknown>";

/// The mfa text OTP's LTTng events give when the VM does not know it.
pub(super) const UNDEFINED: &str = "undefined";

/// The sentinel for an integer erl_tracer does not carry (a message
/// queue's length, a call's depth, a size the bounded walk gave up on).
pub(super) const UNAVAILABLE: i64 = -1;

/// The sequential-trace token fields (label, previous, current) of a
/// message that carries no token: 0, as OTP passes them (its scripts test
/// `arg3 == 0 && arg4 == 0 && arg5 == 0`). erl_tracer does not carry the
/// token, so every message is passed so.
pub(super) const NO_TOKEN: i64 = 0;

impl<'a> Event<'a> {
    /// `extra` in the options map, if any.
    pub(super) fn extra(&self) -> Option<Term<'a>> {
        self.opts.map_get(atoms::extra().to_term(self.env)).ok()
    }

    /// The tracee's text (a local pid or port: cached).
    pub(super) fn tracee<'b>(&self, buf: &'b mut TextBuf) -> Str<'b> {
        buf.term(self.tracee)
    }

    /// A pid or port (or any term) of this event as text.
    pub(super) fn id<'b>(&self, term: Term<'_>, buf: &'b mut TextBuf) -> Str<'b> {
        buf.term(term)
    }

    /// Is the tracer automatic mode's own session (OTP 27+, state `auto`)?
    /// There a process inside a span is traced in the span session too.
    pub(super) fn auto_session(&self) -> bool {
        self.tracer_state.as_c_arg() == atoms::auto().as_c_arg()
    }

    /// Is the tracer the span tracer (`{dtrace_tracer, span}`)?
    pub(super) fn span_state(&self) -> bool {
        self.tracer_state.as_c_arg() == atoms::span().as_c_arg()
    }

    /// The trace tag's name (`in`, `out_exited`, `link`, ...).
    pub(super) fn tag_name<'b>(&self, buf: &'b mut TextBuf) -> Str<'b> {
        buf.atom(self.env, self.trace_tag)
    }
}

/// `{M, F, Arity}` or `{M, F, Args}` (a list of at most 255 elements).
pub(super) fn mfa_parts(mfa: Term<'_>) -> Option<(Term<'_>, Term<'_>, u32)> {
    let (m, f, a) = mfa.decode::<(Term, Term, Term)>().ok()?;
    if !matches!(m.get_type(), TermType::Atom) || !matches!(f.get_type(), TermType::Atom) {
        return None;
    }
    let arity = match a.decode::<u32>() {
        Ok(n) => n,
        Err(_) => list_length(a, 255)?,
    };
    Some((m, f, arity))
}

/// `{M, F, Arity | Args}` as `m:f/arity` text, `unknown` for anything
/// else (the VM passes 0 when it does not know): `UNKNOWN_MFA` for the SDT
/// probes, `UNDEFINED` for OTP's LTTng events.
pub(super) fn mfa_text<'b>(mfa: Term<'_>, unknown: &str, buf: &'b mut TextBuf) -> Str<'b> {
    match mfa_parts(mfa) {
        Some((m, f, a)) => buf.mfa(m, f, a),
        None => buf.literal(unknown),
    }
}

/// The length of a proper list, if at most `max`.
pub(super) fn list_length(list: Term<'_>, max: u32) -> Option<u32> {
    let mut n = 0;
    let mut cell = list;
    while !cell.is_empty_list() {
        cell = cell.list_get_cell().ok()?.1;
        n += 1;
        if n > max {
            return None;
        }
    }
    Some(n)
}

/// OTP's `type` of a link event: `link` or `unlink`.
pub(super) fn link_kind(tag: TraceTag) -> &'static str {
    match tag {
        TraceTag::Link | TraceTag::GettingLinked => "link",
        _ => "unlink",
    }
}

/// OTP's ends of a link event: (from, to), the other end first for
/// `getting_linked` and `getting_unlinked`.
pub(super) fn link_ends<'b>(tag: TraceTag, me: Str<'b>, other: Str<'b>) -> (Str<'b>, Str<'b>) {
    match tag {
        TraceTag::GettingLinked | TraceTag::GettingUnlinked => (other, me),
        _ => (me, other),
    }
}
