//! Process life (the `procs` flag): spawn, exit, links and registered
//! names, and `process__spawn` from meta tracing of the spawn BIFs.

use rustler::Term;
use rustler::sys::ErlNifTerm;

use super::event::{Event, TraceTag, UNDEFINED, UNKNOWN_MFA, link_ends, link_kind, list_length, mfa_text};
use crate::probes::org_erlang_dyntrace::{process_exit, process_link, process_register, process_spawn};
use crate::probes::{
    dtrace_process__link, dtrace_process__register, dtrace_process__unlink, process__exit, process__spawn,
};
use crate::text::{KeptText, TextBuf, is_local_pid};

mod atoms {
    rustler::atoms! { kill }
}

/// `spawn`: the tracee spawned TraceTerm, starting in extra's `{M, F, Args}`.
pub(crate) fn spawn(e: &Event<'_>, _tag: TraceTag) {
    let (mut child, mut start) = (TextBuf::new(), TextBuf::new());
    let child = e.id(e.term, &mut child);
    if process__spawn::enabled() {
        let mfa = match e.extra() {
            Some(x) => mfa_text(x, UNKNOWN_MFA, &mut start),
            None => start.literal(UNKNOWN_MFA),
        };
        process__spawn::fire(child, mfa);
    }
    if process_spawn::enabled() {
        let (mut parent, mut entry) = (TextBuf::new(), TextBuf::new());
        let entry = match e.extra() {
            Some(x) => mfa_text(x, UNDEFINED, &mut entry),
            None => entry.literal(UNDEFINED),
        };
        process_spawn::fire(child, e.tracee(&mut parent), entry);
    }
}

/// `exit`: the tracee exits with reason TraceTerm (`~p` text).
pub(crate) fn exit(e: &Event<'_>, _tag: TraceTag) {
    let (mut pid, mut reason) = (TextBuf::new(), TextBuf::new());
    let (pid, reason) = (e.tracee(&mut pid), reason.term(e.term));
    process__exit::fire(pid, reason);
    process_exit::fire(pid, reason);
}

/// `link`, `unlink`, `getting_linked`, `getting_unlinked`: the tracee and
/// TraceTerm. OTP's `process_link` names the two ends in link order (the
/// other end first for `getting_*`) and the kind `link` or `unlink`.
pub(crate) fn link(e: &Event<'_>, tag: TraceTag) {
    let (mut me, mut other, mut kind) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let (me, other) = (e.tracee(&mut me), e.id(e.term, &mut other));
    if dtrace_process__link::enabled() {
        dtrace_process__link::fire(me, other, e.tag_name(&mut kind));
    }
    if process_link::enabled() {
        let (from, to) = link_ends(tag, me, other);
        let mut otp_kind = TextBuf::new();
        process_link::fire(from, to, otp_kind.literal(link_kind(tag)));
    }
}

/// `unlink`, `getting_unlinked`: the tracee and TraceTerm were unlinked.
pub(crate) fn unlink(e: &Event<'_>, _tag: TraceTag) {
    let (mut me, mut other, mut kind) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    dtrace_process__unlink::fire(e.tracee(&mut me), e.id(e.term, &mut other), e.tag_name(&mut kind));
}

/// `register`, `unregister`: the tracee (a process, or a port) and the
/// name TraceTerm.
pub(crate) fn register(e: &Event<'_>, _tag: TraceTag) {
    let (mut me, mut name, mut kind) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let (me, name, kind) = (e.tracee(&mut me), name.atom(e.env, e.term), e.tag_name(&mut kind));
    dtrace_process__register::fire(me, name, kind);
    process_register::fire(me, name, kind);
}

/// `process__spawn` in automatic mode, without a trace flag on any
/// process: dtrace_vm meta-traces the three BIFs every local spawn goes
/// through (`erlang:spawn/3`, `spawn_link/3`, `spawn_opt/4`; `spawn/1`,
/// `spawn_monitor/1`, proc_lib and the rest call them) with the tracer
/// `{dtrace_tracer, spawn_meta}` and a `return_trace` match spec. The call event
/// carries the arguments (the mfa the new process starts in), the return
/// event the new pid. Both come from the calling process on the same
/// scheduler thread, one right after the other (the BIFs do not yield),
/// so the mfa waits in a per-thread slot keyed by the caller.
pub(crate) fn spawn_meta(e: &Event<'_>, tag: TraceTag) {
    match tag {
        TraceTag::Call => spawn_called(e),
        TraceTag::ReturnFrom => spawn_returned(e),
        _ => {}
    }
}

/// The caller of the last spawn BIF on this thread and the mfa text.
type PendingSpawn = Option<(ErlNifTerm, KeptText)>;

thread_local! {
    static PENDING_SPAWN: std::cell::Cell<PendingSpawn> = const { std::cell::Cell::new(None) };
}

/// `{erlang, spawn | spawn_link | spawn_opt, [M, F, Args | _]}`: keeps the
/// mfa the new process starts in.
fn spawn_called(e: &Event<'_>) {
    let Ok((_, _, args)) = e.term.decode::<(Term, Term, Term)>() else { return };
    let Ok((m, rest)) = args.list_get_cell() else { return };
    let Ok((f, rest)) = rest.list_get_cell() else { return };
    let Ok((a, _)) = rest.list_get_cell() else { return };
    let Some(arity) = list_length(a, 255) else { return };
    let mut mfa = TextBuf::new();
    if mfa.mfa(m, f, arity).is_null() {
        return;
    }
    PENDING_SPAWN.set(Some((e.tracee.as_c_arg(), mfa.keep())));
}

/// The BIF returned the new pid (or `{Pid, MonitorRef}` from `spawn_opt/4`
/// with `monitor`): fires with the kept mfa.
fn spawn_returned(e: &Event<'_>) {
    let Some((caller, text)) = PENDING_SPAWN.take() else { return };
    if caller != e.tracee.as_c_arg() {
        return;
    }
    let Some(ret) = e.extra() else { return };
    let pid = match ret.decode::<(Term, Term)>() {
        Ok((pid, _)) => pid,
        Err(_) => ret,
    };
    if pid.get_type() != rustler::TermType::Pid || !is_local_pid(e.env, pid) {
        return;
    }
    let (mut id, mut mfa) = (TextBuf::new(), TextBuf::new());
    let (pid, mfa) = (e.id(pid, &mut id), mfa.kept(&text));
    process__spawn::fire(pid, mfa);
    if process_spawn::enabled() {
        let mut parent = TextBuf::new();
        process_spawn::fire(pid, e.tracee(&mut parent), mfa);
    }
}

/// `process__exit_signal` in automatic mode: `dtrace_vm` meta-traces
/// `erlang:exit/2` (the tracer `{dtrace_tracer, exit_meta}`): the call event of
/// `exit(Pid, Reason)` from the tracee, for a local process that is alive
/// (OTP fires as the signal is queued to a process; none for a port, a
/// remote or a dead pid). OTP shows `kill` as `killed`. Exits along links
/// have no event.
pub(crate) fn exit_signal(e: &Event<'_>, _tag: TraceTag) {
    let Ok((_, _, args)) = e.term.decode::<(Term, Term, Term)>() else { return };
    let Ok((to, rest)) = args.list_get_cell() else { return };
    let Ok((reason, _)) = rest.list_get_cell() else { return };
    if to.get_type() != rustler::TermType::Pid || !is_local_pid(e.env, to) || !alive(e.env, to) {
        return;
    }
    let (mut sender, mut receiver, mut why) = (TextBuf::new(), TextBuf::new(), TextBuf::new());
    let why = if reason.decode::<rustler::Atom>().is_ok_and(|a| a == atoms::kill()) {
        why.literal("killed")
    } else {
        why.term(reason)
    };
    crate::probes::process__exit_signal::fire(e.tracee(&mut sender), e.id(to, &mut receiver), why);
}

/// Is the local pid `pid` a live process?
fn alive(env: rustler::Env<'_>, pid: Term<'_>) -> bool {
    let mut p = std::mem::MaybeUninit::uninit();
    // SAFETY: enif_get_local_pid reads the term and writes the pid struct
    // we pass; enif_is_process_alive reads that struct, initialised when
    // the first call returned true.
    unsafe {
        rustler::sys::enif_get_local_pid(env.as_c_arg(), pid.as_c_arg(), p.as_mut_ptr()) != 0
            && rustler::sys::enif_is_process_alive(env.as_c_arg(), p.as_mut_ptr()) != 0
    }
}
