//! Messages (the `send` and `'receive'` flags): sends with their flat size,
//! messages queued to a process, commands to a port.

use rustler::{Atom, Env, Term, TermType};

use super::event::{Event, NO_TOKEN, TraceTag, UNAVAILABLE, UNDEFINED, UNKNOWN_MFA};
use super::ports::known_port;
use crate::flat_size::{flat_size, size_and_binary_bytes};
use crate::probes::org_erlang_dyntrace::{message_receive, message_send};
use crate::probes::{
    Str, dtrace_message__send_code, dtrace_message__send_large, message__queued, message__send, message__send__remote,
    port__command,
};
use crate::text::{TextBuf, is_local_pid};

mod atoms {
    rustler::atoms! { command, close, connect, match_spec_result }
}

/// `send`, `send_to_non_existing_process`: the tracee sent message
/// TraceTerm to extra (a pid, a registered name, `{Name, Node}`, a port).
pub(crate) fn send(e: &Event<'_>, _tag: TraceTag) {
    let extra = e.extra();
    let mut sender = TextBuf::new();
    let sender = e.tracee(&mut sender);
    let (local, remote) = (message__send::enabled(), message__send__remote::enabled());
    if let Some(to) = extra.filter(|_| local || remote) {
        let mut receiver = TextBuf::new();
        match destination(e.env, to) {
            Destination::Local(to) if local => {
                let size = flat_size(e.term).map_or(UNAVAILABLE, |s| s as i64);
                message__send::fire(sender, e.id(to, &mut receiver), size, NO_TOKEN, NO_TOKEN, NO_TOKEN);
            }
            Destination::Remote { node, receiver: r } if remote => {
                let size = flat_size(e.term).map_or(UNAVAILABLE, |s| s as i64);
                let mut node_text = TextBuf::new();
                let node_text = match node {
                    Some(n) => node_text.atom(e.env, n),
                    None => node_of_pid(e.env, to, &mut node_text),
                };
                message__send__remote::fire(
                    sender,
                    node_text,
                    e.id(r, &mut receiver),
                    size,
                    NO_TOKEN,
                    NO_TOKEN,
                    NO_TOKEN,
                );
            }
            _ => {}
        }
    }
    if message_send::enabled() {
        let (mut receiver, mut message) = (TextBuf::new(), TextBuf::new());
        let receiver = match extra {
            Some(to) => receiver.term(to),
            None => receiver.literal(UNDEFINED),
        };
        message_send::fire(sender, receiver, message.term(e.term));
    }
}

/// `'receive'` on a process: a message TraceTerm was queued to the tracee
/// (OTP's `message__queued`; the queue length is not in the event: -1; nor
/// is the token: 0, OTP's value without one). Also OTP's `message_receive`,
/// for a port too.
pub(crate) fn queued(e: &Event<'_>, _tag: TraceTag) {
    let mut receiver = TextBuf::new();
    let receiver = e.tracee(&mut receiver);
    if message__queued::enabled() && e.tracee.get_type() != TermType::Port {
        let size = flat_size(e.term).map_or(UNAVAILABLE, |s| s as i64);
        message__queued::fire(receiver, size, UNAVAILABLE, NO_TOKEN, NO_TOKEN, NO_TOKEN);
    }
    if message_receive::enabled() {
        let mut message = TextBuf::new();
        message_receive::fire(receiver, message.term(e.term));
    }
}

/// `'receive'` on a port: it received `{Pid, {command, Data}}`,
/// `{Pid, close}` or `{Pid, {connect, NewOwner}}`.
pub(crate) fn port_command(e: &Event<'_>, _tag: TraceTag) {
    let Ok((from, what)) = e.term.decode::<(Term, Term)>() else { return };
    let kind = if what.decode::<Atom>().is_ok_and(|a| a == atoms::close()) {
        "close"
    } else if let Ok((k, _)) = what.decode::<(Atom, Term)>() {
        if k == atoms::command() {
            "command"
        } else if k == atoms::connect() {
            "connect"
        } else {
            return;
        }
    } else {
        return;
    };
    let (mut pid, mut port, mut name, mut k) = (TextBuf::new(), TextBuf::new(), TextBuf::new(), TextBuf::new());
    let _ = e.tracee(&mut port);
    known_port(&port, &mut name, None);
    port__command::fire(e.id(from, &mut pid), port.get(), name.get(), k.literal(kind));
}

/// The least words, and bytes of binaries, of a send that fires
/// `dtrace_message__send_large`.
const LARGE_WORDS: i64 = 1024;
const LARGE_BYTES: i64 = 16384;

/// `send`, `send_to_non_existing_process`: `dtrace_message__send_large`,
/// the sizes of `send_code` without a process dump (no match spec), for a
/// message of at least `LARGE_WORDS` words or `LARGE_BYTES` bytes of
/// binaries (or not counted): a smaller one costs the walk, not the probe.
pub(crate) fn send_large(e: &Event<'_>, _tag: TraceTag) {
    let Some(to) = e.extra() else { return };
    let (size, bytes) = size_and_binary_bytes(e.term).map_or((UNAVAILABLE, UNAVAILABLE), |(w, b)| (w as i64, b as i64));
    if size != UNAVAILABLE && size < LARGE_WORDS && bytes < LARGE_BYTES {
        return;
    }
    let (mut sender, mut receiver) = (TextBuf::new(), TextBuf::new());
    dtrace_message__send_large::fire(e.tracee(&mut sender), e.id(to, &mut receiver), size, bytes);
}

/// `send`, `send_to_non_existing_process` while `dtrace_vm` has set the
/// send match spec `[{'_', [], [{message, {process_dump}}]}]` (the only
/// action of a send match spec that tells the sender's code: OTP's
/// match-spec guide lists `caller`, `caller_line` and `current_stacktrace`
/// for call tracing only, and `erlang:trace_pattern(send, ...)` raises
/// badarg for them): the dump arrives as `match_spec_result` in the
/// options; its stack's return addresses name the code
/// (`process_dump::sender_code`).
/// Sizes as `message__send`'s, with the bytes of the message's binaries.
pub(crate) fn send_code(e: &Event<'_>, _tag: TraceTag) {
    let Some(to) = e.extra() else { return };
    let (size, bytes) = size_and_binary_bytes(e.term).map_or((UNAVAILABLE, UNAVAILABLE), |(w, b)| (w as i64, b as i64));
    let (mut sender, mut receiver, mut code) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let dump =
        e.opts.map_get(atoms::match_spec_result().to_term(e.env)).ok().and_then(|d| d.decode::<rustler::Binary>().ok());
    let code = match dump.and_then(|d| crate::process_dump::sender_code(d.as_slice())) {
        Some(text) => code.bytes(&text),
        None => code.literal(UNKNOWN_MFA),
    };
    dtrace_message__send_code::fire(e.tracee(&mut sender), e.id(to, &mut receiver), size, bytes, code);
}

/// Where a message goes.
enum Destination<'a> {
    /// A process or port on this node (a registered name resolved to its
    /// pid where it can be).
    Local(Term<'a>),
    /// Another node: its name when the destination says it, and the
    /// receiver (a pid or a registered name).
    Remote { node: Option<Term<'a>>, receiver: Term<'a> },
}

fn destination<'a>(env: Env<'a>, to: Term<'a>) -> Destination<'a> {
    match to.get_type() {
        TermType::Pid if is_local_pid(env, to) => Destination::Local(to),
        TermType::Pid => Destination::Remote { node: None, receiver: to },
        TermType::Atom => Destination::Local(whereis(env, to).unwrap_or(to)),
        TermType::Tuple => match to.decode::<(Term, Atom)>() {
            Ok((name, node)) if Some(node) == this_node(env) => Destination::Local(whereis(env, name).unwrap_or(name)),
            Ok((name, node)) => {
                Destination::Remote { node: Some(rustler::Encoder::encode(&node, env)), receiver: name }
            }
            Err(_) => Destination::Local(to),
        },
        _ => Destination::Local(to),
    }
}

/// This node's name, read from the external format of the calling
/// process's pid (the NIF API has no `node()`); only `{Name, Node}` sends
/// need it.
fn this_node(env: Env<'_>) -> Option<Atom> {
    let mut pid = std::mem::MaybeUninit::uninit();
    // SAFETY: enif_self writes the pid of the calling process, if there
    // is one, into our struct.
    let me = unsafe { rustler::sys::enif_self(env.as_c_arg(), pid.as_mut_ptr()) };
    if me.is_null() {
        return None;
    }
    // SAFETY: enif_self initialised it.
    let term = unsafe { rustler::sys::enif_make_pid(env.as_c_arg(), *pid.as_ptr()) };
    // SAFETY: a pid term of this env.
    pid_node(env, unsafe { Term::new(env, term) })
}

/// Resolves a registered name to its pid.
fn whereis<'a>(env: Env<'a>, name: Term<'a>) -> Option<Term<'a>> {
    let mut pid = std::mem::MaybeUninit::uninit();
    // SAFETY: enif_whereis_pid reads the name and writes the pid struct we
    // pass; it returns 0 when nothing is registered under the name.
    if unsafe { rustler::sys::enif_whereis_pid(env.as_c_arg(), name.as_c_arg(), pid.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: initialised by enif_whereis_pid.
    let term = unsafe { rustler::sys::enif_make_pid(env.as_c_arg(), *pid.as_ptr()) };
    // SAFETY: a pid term of this env.
    Some(unsafe { Term::new(env, term) })
}

/// The node of a pid, from its external format (`NEW_PID_EXT` or
/// `PID_EXT`, whose first field is the node atom).
fn pid_node(env: Env<'_>, pid: Term<'_>) -> Option<Atom> {
    let mut bin = std::mem::MaybeUninit::<rustler::sys::ErlNifBinary>::uninit();
    // SAFETY: enif_term_to_binary fills the binary struct we pass; we
    // release it below.
    if unsafe { rustler::sys::enif_term_to_binary(env.as_c_arg(), pid.as_c_arg(), bin.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: initialised by enif_term_to_binary; its data is `size` bytes.
    let (data, size) = unsafe { ((*bin.as_ptr()).data, (*bin.as_ptr()).size) };
    // SAFETY: as above, valid until released.
    let bytes = unsafe { std::slice::from_raw_parts(data, size) };
    let name = external_atom(bytes);
    let atom = name.and_then(|n| std::str::from_utf8(n).ok()).and_then(|n| Atom::from_str(env, n).ok());
    // SAFETY: released once, after the last use of `bytes`.
    unsafe { rustler::sys::enif_release_binary(bin.as_mut_ptr()) };
    atom
}

/// The node atom's text in the external format of a pid: 131, then
/// `X`/`g`, then the atom (`w` small UTF-8, `v` UTF-8, `d` latin-1, `s`
/// small latin-1).
fn external_atom(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.first() != Some(&131) || !matches!(bytes.get(1), Some(b'X') | Some(b'g')) {
        return None;
    }
    let (len, start) = match bytes.get(2)? {
        b'w' | b's' => (*bytes.get(3)? as usize, 4),
        b'v' | b'd' => (u16::from_be_bytes([*bytes.get(3)?, *bytes.get(4)?]) as usize, 5),
        _ => return None,
    };
    bytes.get(start..start + len)
}

/// A remote pid's node name into `buf`; empty if it cannot be read.
fn node_of_pid<'b>(env: Env<'_>, pid: Term<'_>, buf: &'b mut TextBuf) -> Str<'b> {
    match pid_node(env, pid) {
        Some(node) => buf.atom(env, rustler::Encoder::encode(&node, env)),
        None => buf.literal(""),
    }
}
