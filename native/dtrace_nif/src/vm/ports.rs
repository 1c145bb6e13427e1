//! Ports (the `ports` and `running_ports` flags): open, exit, links and
//! scheduling.

use rustler::{Atom, Binary, Term, TermType};

use super::event::{Event, TraceTag, UNAVAILABLE, UNDEFINED, link_ends, link_kind};
use crate::port_names;
use crate::probes::org_erlang_dyntrace::{port_exit, port_link, port_open, port_scheduled};
use crate::probes::{
    Str, driver__call, driver__control, driver__output, driver__outputv, driver__timeout, dtrace_port__link,
    port__connect, port__control, port__exit, port__open,
};
use crate::text::TextBuf;

mod atoms {
    rustler::atoms! { command, control, call, connect, timeout }
}

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

/// What a port's `'receive'` event says it was asked (erl_trace.c builds
/// these shapes: `{Caller, {command, Bin | [Bin]}}`, `{Caller, {control,
/// {Cmd, Bin}}}`, `{Caller, {call, {Cmd, Bin}}}`, `{Caller, {connect,
/// New}}`, `timeout`).
enum Asked<'a> {
    Output { caller: Term<'a>, bytes: i64 },
    Outputv { caller: Term<'a>, bytes: i64 },
    Control { caller: Term<'a>, command: i64, bytes: i64 },
    Call { caller: Term<'a>, command: i64, bytes: i64 },
    Connect { caller: Term<'a>, new: Term<'a> },
    Timeout,
}

impl<'a> Asked<'a> {
    fn of(term: Term<'a>) -> Option<Self> {
        if term.decode::<Atom>().is_ok_and(|a| a == atoms::timeout()) {
            return Some(Asked::Timeout);
        }
        let (caller, what) = term.decode::<(Term, Term)>().ok()?;
        let (kind, data) = what.decode::<(Atom, Term)>().ok()?;
        if kind == atoms::command() {
            return Some(match data.get_type() {
                TermType::Binary => Asked::Output { caller, bytes: binary_bytes(data) },
                _ => Asked::Outputv { caller, bytes: list_bytes(data) },
            });
        }
        if kind == atoms::connect() {
            return Some(Asked::Connect { caller, new: data });
        }
        let (command, bin) = data.decode::<(i64, Term)>().ok()?;
        let bytes = binary_bytes(bin);
        if kind == atoms::control() {
            Some(Asked::Control { caller, command, bytes })
        } else if kind == atoms::call() {
            Some(Asked::Call { caller, command, bytes })
        } else {
            None
        }
    }
}

/// A binary's size in bytes, -1 if it is not one.
fn binary_bytes(t: Term<'_>) -> i64 {
    t.decode::<Binary>().map_or(UNAVAILABLE, |b| b.len() as i64)
}

/// The bytes of an outputv event's list of binaries (the first 1024
/// elements; -1 if it holds anything else or is longer).
fn list_bytes(list: Term<'_>) -> i64 {
    let mut total = 0_i64;
    let mut cell = list;
    for _ in 0..1024 {
        if cell.is_empty_list() {
            return total;
        }
        let Ok((head, tail)) = cell.list_get_cell() else { return UNAVAILABLE };
        let Ok(b) = head.decode::<Binary>() else { return UNAVAILABLE };
        total += b.len() as i64;
        cell = tail;
    }
    UNAVAILABLE
}

/// `'receive'` on a port, for OTP's driver probes and `port__control`,
/// `port__connect`: a command's data (one binary: `driver__output`; a list
/// of them: `driver__outputv`), `port_control/3`, `port_call/3`, a
/// connect, the driver's timer. The port's name and owner come from the
/// table its `open` event filled (`port_names`); a connect moves the owner.
pub(crate) fn port_receive(e: &Event<'_>, _tag: TraceTag) {
    let Some(asked) = Asked::of(e.term) else { return };
    let (mut port, mut name, mut who) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let _ = e.tracee(&mut port);
    match asked {
        Asked::Output { caller, bytes } if driver__output::enabled() => {
            known_port(&port, &mut name, None);
            driver__output::fire(e.id(caller, &mut who), port.get(), name.get(), bytes);
        }
        Asked::Outputv { caller, bytes } if driver__outputv::enabled() => {
            known_port(&port, &mut name, None);
            driver__outputv::fire(e.id(caller, &mut who), port.get(), name.get(), bytes);
        }
        Asked::Control { caller, command, bytes } => {
            known_port(&port, &mut name, None);
            let caller = e.id(caller, &mut who);
            port__control::fire(caller, port.get(), name.get(), command);
            driver__control::fire(caller, port.get(), name.get(), command, bytes);
        }
        Asked::Call { caller, command, bytes } if driver__call::enabled() => {
            known_port(&port, &mut name, None);
            driver__call::fire(e.id(caller, &mut who), port.get(), name.get(), command, bytes);
        }
        Asked::Connect { caller, new } => {
            // The owner before the connect: kept from the open event and
            // earlier connects, else the caller (for Port ! {Owner,
            // {connect, New}} they are the same). The name is the one kept,
            // or empty: never NULL, as OTP always passes its driver's name
            // (and port1.d copyinstr()s it).
            let mut owner = TextBuf::new();
            let mut kept = false;
            port_names::with(port.text(), false, |known| {
                let _ = name.bytes(known.as_ref().map_or(&[][..], |k| k.name));
                if let Some(k) = known.filter(|k| !k.owner.is_empty()) {
                    let _ = owner.bytes(k.owner);
                    kept = true;
                }
            });
            if !kept {
                let _ = owner.term(caller);
            }
            let mut new_owner = TextBuf::new();
            let _ = e.id(new, &mut new_owner);
            if port__connect::enabled() {
                port__connect::fire(owner.get(), port.get(), name.get(), new_owner.get());
            }
            let _ = port_names::set_owner(port.text(), new_owner.text());
        }
        Asked::Timeout if driver__timeout::enabled() => {
            let mut owner = TextBuf::new();
            known_port(&port, &mut name, Some(&mut owner));
            driver__timeout::fire(owner.get(), port.get(), name.get());
        }
        _ => {}
    }
}
