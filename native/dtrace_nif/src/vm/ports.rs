//! Ports (the `ports` and `running_ports` flags): open, exit, links and
//! scheduling.

use rustler::TermType;

use super::procs::{link_ends, link_kind};
use super::{Event, TraceTag, UNDEFINED};
use crate::port_names;
use crate::probes::org_erlang_dyntrace::{port_exit, port_link, port_open, port_scheduled};
use crate::probes::{Str, dtrace_port__link, port__exit, port__open};
use crate::text::TextBuf;

/// `open`: TraceTerm (a pid) opened the tracee, with extra's name (what
/// `erlang:port_info(Port, name)` says: `cat` for `open_port({spawn,
/// "cat"}, ...)`, `tcp_inet` for a socket). `vm::trace` keeps the name
/// ([`remember`]) before this runs.
pub(crate) fn port_open(e: &Event<'_>, _tag: TraceTag) {
    let (mut owner, mut port) = (TextBuf::new(), TextBuf::new());
    let (owner, port) = (e.id(e.term, &mut owner), e.tracee(&mut port));
    if port__open::enabled() {
        let mut name = TextBuf::new();
        port__open::fire(owner, port_name(e, &mut name), port);
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

/// The name an `open` event gives (its extra, an atom), as plain text;
/// empty if the event has none.
fn port_name<'b>(e: &Event<'_>, buf: &'b mut TextBuf) -> Str<'b> {
    match e.extra() {
        Some(n) if matches!(n.get_type(), TermType::Atom) => buf.atom(e.env, n),
        Some(n) => buf.term(n),
        None => buf.literal(""),
    }
}

/// Keeps the port's name and opener from its `open` event, for
/// `port__command` and `port__exit` (bounded table: `port_names`).
pub(crate) fn remember(e: &Event<'_>) {
    let (mut owner, mut port, mut name) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let _ = (e.id(e.term, &mut owner), e.tracee(&mut port), port_name(e, &mut name));
    port_names::insert(port.text(), owner.text(), name.text());
}

/// Forgets the port after its `closed` event.
pub(crate) fn forget(e: &Event<'_>) {
    let mut port = TextBuf::new();
    let _ = e.tracee(&mut port);
    port_names::with(port.text(), true, |_| ());
}

/// Writes the name the port was opened with (empty when unknown: opened
/// before anything traced ports, or the table was full) into `name`, and,
/// into `opener`, the process that opened it (the port itself when
/// unknown).
pub(crate) fn known_port(port: &TextBuf, name: &mut TextBuf, opener: Option<&mut TextBuf>) {
    port_names::with(port.text(), false, |known| {
        let (n, o) = match known {
            Some(k) if !k.owner.is_empty() => (k.name, k.owner),
            Some(k) => (k.name, port.text()),
            None => (&[][..], port.text()),
        };
        let _ = name.bytes(n);
        if let Some(opener) = opener {
            let _ = opener.bytes(o);
        }
    });
}

/// `closed`: the tracee exited with reason TraceTerm. OTP's SDT probe also
/// names the process that sent the exit signal (or the port itself) and the
/// port's name: the event carries neither, so the process that opened the
/// port and the name it was opened with are passed, as kept from the
/// port's `open` event (the port itself and an empty name when unknown).
pub(crate) fn port_exit(e: &Event<'_>, _tag: TraceTag) {
    let (mut port, mut reason) = (TextBuf::new(), TextBuf::new());
    let _ = e.tracee(&mut port);
    let reason = reason.term(e.term);
    if port__exit::enabled() {
        let (mut name, mut opener) = (TextBuf::new(), TextBuf::new());
        known_port(&port, &mut name, Some(&mut opener));
        port__exit::fire(opener.get(), port.get(), name.get(), reason);
    }
    port_exit::fire(port.get(), reason);
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
