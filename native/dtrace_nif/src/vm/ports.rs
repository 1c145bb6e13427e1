//! Ports (the `ports` and `running_ports` flags): open, exit, links and
//! scheduling.

use rustler::TermType;

use super::procs::{link_ends, link_kind};
use super::{Event, TraceTag, UNDEFINED};
use crate::probes::org_erlang_dyntrace::{port_exit, port_link, port_open, port_scheduled};
use crate::probes::{Str, dtrace_port__link, port__exit, port__open};
use crate::text::TextBuf;

/// `open`: TraceTerm (a pid) opened the tracee, with extra's name.
pub(crate) fn port_open(e: &Event<'_>, _tag: TraceTag) {
    let (mut owner, mut port) = (TextBuf::new(), TextBuf::new());
    let (owner, port) = (e.id(e.term, &mut owner), e.tracee(&mut port));
    if port__open::enabled() {
        let mut name = TextBuf::new();
        let name = match e.extra() {
            Some(n) if matches!(n.get_type(), TermType::Atom) => name.atom(e.env, n),
            Some(n) => name.term(n),
            None => Str::NULL,
        };
        port__open::fire(owner, name, port);
    }
    if port_open::enabled() {
        let mut driver = TextBuf::new();
        let driver = match e.extra() {
            Some(x) => driver.term(x),
            None => driver.literal(UNDEFINED),
        };
        port_open::fire(owner, driver, port);
    }
}

/// `closed`: the tracee exited with reason TraceTerm. OTP's SDT probe also
/// names the process and the port's name, which the event does not carry
/// (NULL).
pub(crate) fn port_exit(e: &Event<'_>, _tag: TraceTag) {
    let (mut port, mut reason) = (TextBuf::new(), TextBuf::new());
    let (port, reason) = (e.tracee(&mut port), reason.term(e.term));
    port__exit::fire(Str::NULL, port, Str::NULL, reason);
    port_exit::fire(port, reason);
}

/// `link`, `unlink`, `getting_linked`, `getting_unlinked` of a port.
pub(crate) fn port_link(e: &Event<'_>, tag: TraceTag) {
    let (mut me, mut other, mut kind) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let (me, other) = (e.tracee(&mut me), e.id(e.term, &mut other));
    if dtrace_port__link::enabled() {
        dtrace_port__link::fire(me, other, e.tag_name(&mut kind));
    }
    if port_link::enabled() {
        let (from, to) = link_ends(tag, me, other);
        let mut otp_kind = TextBuf::new();
        port_link::fire(from, to, otp_kind.literal(link_kind(tag)));
    }
}

/// running_ports `in`, `out`: OTP's `port_scheduled`, the operation
/// (TraceTerm, `~p` text) and the trace tag.
pub(crate) fn port_scheduled(e: &Event<'_>, _tag: TraceTag) {
    let (mut port, mut op, mut kind) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    port_scheduled::fire(e.tracee(&mut port), op.term(e.term), e.tag_name(&mut kind));
}
