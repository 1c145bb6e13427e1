//! Messages `dtrace_vm` gets from the VM's monitors and passes on
//! (`vm_monitor_event/4`): `net_kernel:monitor_nodes/2`'s `nodeup` and
//! `nodedown` (`node_monitor` rows), the system monitor's `busy_port` and
//! `busy_dist_port` (`system_monitor` rows).

use rustler::{Term, TermType};

use super::event::{Event, TraceTag};
use crate::probes::{Str, dist__monitor, dist__port_busy, port__busy};
use crate::text::TextBuf;

/// An atom as plain text (a node name: `b@host`), anything else as `~p`.
fn plain<'b>(e: &Event<'_>, t: Term<'_>, buf: &'b mut TextBuf) -> Str<'b> {
    if t.get_type() == TermType::Atom { buf.atom(e.env, t) } else { buf.term(t) }
}

/// `nodeup`, `nodedown`: the tracee is the node that came up or went
/// down, the term `{ThisNode, Type, Reason}` (`dtrace_vm` builds it from
/// the message's info list; Reason `[]` for nodeup, as OTP passes it).
/// OTP's texts are `%T` of what, the node, type and reason; its node is
/// this node's name.
pub(crate) fn dist_monitor(e: &Event<'_>, _tag: TraceTag) {
    let Ok((this, ty, reason)) = e.term.decode::<(Term, Term, Term)>() else { return };
    let (mut node, mut what, mut other, mut t, mut r) =
        (TextBuf::new(), TextBuf::new(), TextBuf::new(), TextBuf::new(), TextBuf::new());
    dist__monitor::fire(
        plain(e, this, &mut node),
        e.tag_name(&mut what),
        e.id(e.tracee, &mut other),
        t.term(ty),
        r.term(reason),
    );
}

/// `busy_port`: the tracee (a process) was suspended sending to the busy
/// port in the term.
pub(crate) fn busy_port(e: &Event<'_>, _tag: TraceTag) {
    if e.term.get_type() != TermType::Port {
        return;
    }
    let mut port = TextBuf::new();
    port__busy::fire(e.id(e.term, &mut port));
}

/// `busy_dist_port`: the tracee (a process) was suspended sending through
/// a busy distribution port; the term is `{Port, RemoteNode | undefined,
/// ThisNode}` (`dtrace_vm` looks the port up in
/// `erlang:system_info(dist_ctrl)`; "" when it is not there). As OTP's:
/// this node's name, then `%T` texts.
pub(crate) fn busy_dist_port(e: &Event<'_>, _tag: TraceTag) {
    let Ok((port, remote, this)) = e.term.decode::<(Term, Term, Term)>() else { return };
    let (mut node, mut p, mut rn, mut pid) = (TextBuf::new(), TextBuf::new(), TextBuf::new(), TextBuf::new());
    // OTP's text of the remote node is %T (quoted where the atom needs it).
    let remote = if remote.get_type() == TermType::Atom && remote.atom_to_string().is_ok_and(|s| s != "undefined") {
        rn.term(remote)
    } else {
        rn.literal("")
    };
    dist__port_busy::fire(plain(e, this, &mut node), e.id(port, &mut p), remote, e.tracee(&mut pid));
}
