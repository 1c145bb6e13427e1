//! The VM's own probes (`process__spawn`, `message__send`, `gc_minor__start`,
//! ...), fed from erl_tracer events: the NIF callbacks a stock VM calls for
//! a process or port traced with `{tracer, dtrace, State}`.
//!
//! `enabled/3` answers `trace` only when a probe the event would fire has a
//! raised semaphore, else `discard`, so an event nobody listens to costs
//! the VM one callback. `trace/5` fires those probes, each checking its
//! semaphore again. Only the generic pair is exported: OTP 25 calls an
//! exported `trace_call/5` or `trace_send/5` with the wrong arguments in
//! some cases (meta and port-send tracing), and the generic callbacks get
//! the real trace tag anyway.
//!
//! Which Erlang trace flags feed which probes is [`GROUPS`]; the
//! `dtrace_vm` process reads [`listening`] every poll and sets exactly the
//! flags whose probes have a tracer. What each event carries, and what it
//! does not (the values probes get as sentinels), is in `probes.d` and the
//! README's probe table.

use std::sync::{OnceLock, RwLock};

use rustler::sys::ErlNifTerm;
use rustler::types::atom::ok;
use rustler::{Atom, Encoder, Env, Term, TermType};

use crate::flat_size::flat_size;
use crate::nif::{LoadStep, NifCall, raw_nif};
use crate::probes::{self, Str};
use crate::text::{IdBuf, KeptText, TextBuf};

raw_nif!("enabled" / 3 => enabled);
raw_nif!("trace" / 5 => trace);
raw_nif!("vm_listening" / 0 => vm_listening);
raw_nif!("vm_call_probes" / 2 => vm_call_probes);
inventory::submit!(LoadStep(load));

mod atoms {
    rustler::atoms! {
        trace, discard, trace_status, extra, wordsize, erlang, hibernate,
        spawn, spawned, exit, link, unlink, getting_linked, getting_unlinked,
        register, unregister, open, closed,
        in_ = "in", out, in_exiting, out_exiting, out_exited,
        send, send_to_non_existing_process, receive = "receive",
        call, return_from, exception_from, return_to, undefined,
        gc_minor_start, gc_major_start, gc_minor_end, gc_major_end,
        command, close, connect, global, local, underscore = "_",
        processes, ports, procs, running, exiting, garbage_collection, arity,
        spawn_meta, running_ports, heap_block_size, old_heap_block_size,
    }
}

/// What a trace tag is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    Spawn,
    Spawned,
    Exit,
    Link,
    Register,
    Open,
    Closed,
    In,
    Out,
    Send,
    Receive,
    Call,
    Return,
    ReturnTo,
    GcMinorStart,
    GcMajorStart,
    GcMinorEnd,
    GcMajorEnd,
    TraceStatus,
    Other,
}

/// Trace tags by their atom (atoms are immediates: compared as raw terms).
static TAGS: OnceLock<Vec<(ErlNifTerm, Tag)>> = OnceLock::new();

fn load(_env: Env<'_>) -> bool {
    use atoms::*;
    // The most frequent tags first: the table is searched in order.
    let table: [(Atom, Tag); 30] = [
        (trace_status(), Tag::TraceStatus),
        (send(), Tag::Send),
        (receive(), Tag::Receive),
        (in_(), Tag::In),
        (out(), Tag::Out),
        (call(), Tag::Call),
        (return_from(), Tag::Return),
        (gc_minor_start(), Tag::GcMinorStart),
        (gc_minor_end(), Tag::GcMinorEnd),
        (gc_major_start(), Tag::GcMajorStart),
        (gc_major_end(), Tag::GcMajorEnd),
        (spawn(), Tag::Spawn),
        (spawned(), Tag::Spawned),
        (exit(), Tag::Exit),
        (in_exiting(), Tag::In),
        (out_exiting(), Tag::Out),
        (out_exited(), Tag::Out),
        (send_to_non_existing_process(), Tag::Send),
        (exception_from(), Tag::Return),
        (return_to(), Tag::ReturnTo),
        (link(), Tag::Link),
        (unlink(), Tag::Link),
        (getting_linked(), Tag::Link),
        (getting_unlinked(), Tag::Link),
        (register(), Tag::Register),
        (unregister(), Tag::Register),
        (open(), Tag::Open),
        (closed(), Tag::Closed),
        (processes(), Tag::Other),
        (ports(), Tag::Other),
    ];
    let _ = TAGS.set(table.iter().map(|(a, t)| (a.as_c_arg(), *t)).collect());
    true
}

fn tag_of(term: ErlNifTerm) -> Tag {
    TAGS.get().and_then(|t| t.iter().find(|(a, _)| *a == term)).map_or(Tag::Other, |&(_, t)| t)
}

/// A trace target: processes or ports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Processes,
    Ports,
}

/// Trace flags and the probes they feed. The `dtrace_vm` process sets a
/// group's flags on a target while any of its probes has a tracer.
struct Group {
    target: Target,
    flags: &'static [fn() -> Atom],
    enabled: fn() -> bool,
}

/// Which flags feed which probes: the one table both the poller (through
/// [`vm_listening`]) and the callbacks follow. `process__spawn` is not
/// here: `procs` feeds it, but when it is the only probe of the processes
/// with a tracer, automatic mode feeds it by meta tracing of the spawn
/// BIFs instead ([`SpawnMeta`]), which sets no flag on any process (the
/// poller decides, from [`vm_listening`]'s `Meta`).
const GROUPS: &[Group] = &[
    Group {
        target: Target::Processes,
        flags: &[atoms::procs],
        enabled: || {
            probes::process__exit::enabled()
                || probes::dtrace_process__link::enabled()
                || probes::dtrace_process__register::enabled()
                || otp_lttng::group_enabled(LttngGroup::Procs)
        },
    },
    Group {
        target: Target::Processes,
        flags: &[atoms::running, atoms::exiting],
        enabled: || {
            probes::process__scheduled::enabled()
                || probes::process__unscheduled::enabled()
                || probes::process__hibernate::enabled()
                || otp_lttng::group_enabled(LttngGroup::Running)
        },
    },
    Group {
        target: Target::Processes,
        flags: &[atoms::send],
        enabled: || {
            probes::message__send::enabled()
                || probes::message__send__remote::enabled()
                || otp_lttng::group_enabled(LttngGroup::Send)
        },
    },
    Group {
        target: Target::Processes,
        flags: &[atoms::receive],
        enabled: || probes::message__queued::enabled() || otp_lttng::group_enabled(LttngGroup::Receive),
    },
    Group { target: Target::Processes, flags: &[atoms::call, atoms::arity], enabled: call_enabled },
    Group {
        target: Target::Processes,
        flags: &[atoms::garbage_collection],
        enabled: || {
            probes::gc_minor__start::enabled()
                || probes::gc_major__start::enabled()
                || probes::gc_minor__end::enabled()
                || probes::gc_major__end::enabled()
                || otp_lttng::group_enabled(LttngGroup::Gc)
        },
    },
    Group {
        target: Target::Ports,
        flags: &[atoms::ports],
        enabled: || {
            probes::port__open::enabled()
                || probes::port__exit::enabled()
                || probes::dtrace_port__link::enabled()
                || otp_lttng::group_enabled(LttngGroup::Ports)
        },
    },
    Group { target: Target::Ports, flags: &[atoms::receive], enabled: probes::port__command::enabled },
    Group {
        target: Target::Ports,
        flags: &[atoms::running_ports],
        enabled: || otp_lttng::group_enabled(LttngGroup::RunningPorts),
    },
];

fn call_enabled() -> bool {
    probes::global__function__entry::enabled()
        || probes::local__function__entry::enabled()
        || probes::function__return::enabled()
        || probes::bif__entry::enabled()
        || probes::bif__return::enabled()
        || otp_lttng::group_enabled(LttngGroup::Call)
}

/// `vm_listening() -> {ProcessFlags, PortFlags, Probes, Meta}`: the trace
/// flags whose probes have a tracer now, the names (binaries) of all the
/// library's probes that have one (SDT note names, and LTTng events as
/// `provider:event`), and `[spawn]` when
/// `process__spawn` has one (its meta-trace patterns are wanted), else
/// `[]` (semaphore reads only).
fn vm_listening(call: NifCall) -> ErlNifTerm {
    call.run_allocating(|env, _args| {
        let mut procs: Vec<Term> = Vec::new();
        let mut ports: Vec<Term> = Vec::new();
        for g in GROUPS.iter().filter(|g| (g.enabled)()) {
            let list = if g.target == Target::Processes { &mut procs } else { &mut ports };
            for flag in g.flags {
                let f = flag().encode(env);
                if !list.contains(&f) {
                    list.push(f);
                }
            }
        }
        let meta: Vec<Atom> =
            if probes::process__spawn::enabled() || otp_lttng::spawn_enabled() { vec![atoms::spawn()] } else { vec![] };
        let mut listening = probes::listened();
        listening.extend(probes::lttng_listened());
        listening.extend(otp_lttng::listened());
        (procs, ports, listening, meta).encode(env)
    })
}

/// The call-traced functions, as `dtrace_vm` set them: which probe a call
/// fires. Read on every call event; written when the patterns change.
#[derive(Default)]
struct CallTable {
    /// `{Module, Function | '_', Arity | -1, global | local}` patterns.
    patterns: Vec<(ErlNifTerm, Option<ErlNifTerm>, Option<u32>, bool)>,
    /// Call-traced BIFs, `{Module, Function, Arity}`.
    bifs: Vec<(ErlNifTerm, ErlNifTerm, u32)>,
}

static CALLS: RwLock<CallTable> = RwLock::new(CallTable { patterns: Vec::new(), bifs: Vec::new() });

/// `vm_call_probes(Patterns, Bifs) -> ok`: `Patterns` is a list of
/// `{Module, Function | '_', Arity | '_', global | local}` (atoms, arity an
/// integer), `Bifs` a list of `{Module, Function, Arity}`: a call of a BIF
/// fires `bif__entry`, another call `global__` or `local__function__entry`
/// as its pattern says. Anything malformed is left out.
fn vm_call_probes(call: NifCall) -> ErlNifTerm {
    call.run_allocating(|env, args| {
        let mut table = CallTable::default();
        for_each_element(args[0], MAX_CALL_ENTRIES, |p| {
            if let Ok((m, f, a, kind)) = p.decode::<(Atom, Term, Term, Atom)>() {
                let f = f.decode::<Atom>().ok().filter(|&f| f != atoms::underscore());
                table.patterns.push((m.as_c_arg(), f.map(|f| f.as_c_arg()), a.decode::<u32>().ok(), kind == atoms::global()));
            }
        });
        for_each_element(args[1], MAX_CALL_ENTRIES, |b| {
            if let Ok((m, f, a)) = b.decode::<(Atom, Atom, u32)>() {
                table.bifs.push((m.as_c_arg(), f.as_c_arg(), a));
            }
        });
        if let Ok(mut calls) = CALLS.write() {
            *calls = table;
        }
        ok().encode(env)
    })
}

/// The most patterns, and the most BIFs, the call table keeps.
const MAX_CALL_ENTRIES: usize = 4096;

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
    Global,
    Local,
}

fn call_kind(m: ErlNifTerm, f: ErlNifTerm, a: u32) -> CallKind {
    let Ok(calls) = CALLS.read() else { return CallKind::Global };
    if calls.bifs.iter().any(|&(bm, bf, ba)| bm == m && bf == f && ba == a) {
        return CallKind::Bif;
    }
    let global = calls
        .patterns
        .iter()
        .find(|&&(pm, pf, pa, _)| pm == m && pf.is_none_or(|pf| pf == f) && pa.is_none_or(|pa| pa == a))
        .is_none_or(|p| p.3);
    if global { CallKind::Global } else { CallKind::Local }
}

/// Is the tracee a port?
fn is_port(t: Term<'_>) -> bool {
    matches!(t.get_type(), TermType::Port)
}

/// `enabled(TraceTag, TracerState, Tracee) -> trace | discard`: `trace`
/// when a probe this event would fire has a tracer. `trace_status` (is the
/// tracer still there?) is always `trace`.
fn enabled(call: NifCall) -> ErlNifTerm {
    let Some(tag) = call.raw_arg(0) else { return atoms::discard().as_c_arg() };
    let state = call.raw_arg(1);
    let tag = tag_of(tag);
    let sdt = match tag {
        Tag::TraceStatus => return atoms::trace().as_c_arg(),
        Tag::Spawn => probes::process__spawn::enabled(),
        Tag::Call if state == Some(atoms::spawn_meta().as_c_arg()) => probes::process__spawn::enabled(),
        Tag::Exit => probes::process__exit::enabled(),
        Tag::Link => probes::dtrace_process__link::enabled() || probes::dtrace_port__link::enabled(),
        Tag::Register => probes::dtrace_process__register::enabled(),
        Tag::Open => probes::port__open::enabled(),
        Tag::Closed => probes::port__exit::enabled(),
        Tag::In => probes::process__scheduled::enabled(),
        Tag::Out => probes::process__unscheduled::enabled() || probes::process__hibernate::enabled(),
        Tag::Send => probes::message__send::enabled() || probes::message__send__remote::enabled(),
        Tag::Receive => probes::message__queued::enabled() || probes::port__command::enabled(),
        Tag::Call | Tag::Return => call_enabled(),
        Tag::GcMinorStart => probes::gc_minor__start::enabled(),
        Tag::GcMajorStart => probes::gc_major__start::enabled(),
        Tag::GcMinorEnd => probes::gc_minor__end::enabled(),
        Tag::GcMajorEnd => probes::gc_major__end::enabled(),
        Tag::ReturnTo | Tag::Spawned | Tag::Other => false,
    };
    let listened = sdt || otp_lttng::enabled(tag, state == Some(atoms::spawn_meta().as_c_arg()));
    if listened { atoms::trace() } else { atoms::discard() }.as_c_arg()
}

/// `trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) -> ok`: fires the
/// probes this event feeds that have a tracer.
fn trace(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| {
        let event = Event { env, tracee: args[2], term: args[3], opts: args[4] };
        let state = args[1].as_c_arg();
        let tag = tag_of(args[0].as_c_arg());
        if state == atoms::spawn_meta().as_c_arg() {
            if matches!(tag, Tag::Call | Tag::Return) {
                SpawnMeta::event(&event, tag == Tag::Call);
            }
            return ok().encode(env);
        }
        otp_lttng::emit(&event, tag, args[0]);
        match tag {
            Tag::Spawn => event.spawn(),
            Tag::Exit => event.exit(),
            Tag::Link => event.link(args[0]),
            Tag::Register => event.register(args[0]),
            Tag::Open => event.port_open(),
            Tag::Closed => event.port_closed(),
            Tag::In => event.scheduled(),
            Tag::Out => event.unscheduled(),
            Tag::Send => event.send(),
            Tag::Receive => event.receive(),
            Tag::Call => event.call(),
            Tag::Return => event.ret(),
            Tag::GcMinorStart => event.gc(probes::gc_minor__start::enabled, probes::gc_minor__start::fire),
            Tag::GcMajorStart => event.gc(probes::gc_major__start::enabled, probes::gc_major__start::fire),
            Tag::GcMinorEnd => event.gc(probes::gc_minor__end::enabled, probes::gc_minor__end::fire),
            Tag::GcMajorEnd => event.gc(probes::gc_major__end::enabled, probes::gc_major__end::fire),
            Tag::ReturnTo | Tag::Spawned | Tag::TraceStatus | Tag::Other => {}
        }
        ok().encode(env)
    })
}

/// What erl_tracer passes to `trace/5`.
struct Event<'a> {
    env: Env<'a>,
    tracee: Term<'a>,
    term: Term<'a>,
    opts: Term<'a>,
}

/// The mfa text OTP gives when the VM does not know the function.
const UNKNOWN_MFA: &str = "<unknown>";

/// The sentinel for an integer erl_tracer does not carry.
const UNAVAILABLE: i64 = -1;

impl<'a> Event<'a> {
    /// `extra` in the options map, if any.
    fn extra(&self) -> Option<Term<'a>> {
        self.opts.map_get(atoms::extra().to_term(self.env)).ok()
    }

    /// The tracee's text (erl_tracer passes a local pid or port, whose
    /// text is cached; anything else, as `trace/5` called by hand may
    /// pass, is formatted).
    fn tracee<'b>(&self, buf: &'b mut IdBuf) -> Str<'b> {
        buf.id(self.tracee, cacheable(self.env, self.tracee))
    }

    /// `{M, F, Arity}` or `{M, F, Args}` as `m:f/arity` text; `<unknown>`
    /// for anything else (the VM passes 0 when it does not know).
    fn mfa<'b>(&self, mfa: Term<'a>, buf: &'b mut TextBuf) -> Str<'b> {
        match mfa_parts(mfa) {
            Some((m, f, a)) => buf.mfa(m, f, a),
            None => buf.literal(UNKNOWN_MFA),
        }
    }

    /// procs `spawn`: the tracee spawned TraceTerm, starting in extra's
    /// `{M, F, Args}`.
    fn spawn(&self) {
        if probes::process__spawn::enabled() {
            let (mut pid, mut mfa) = (IdBuf::new(), TextBuf::new());
            let start = match self.extra() {
                Some(e) => self.mfa(e, &mut mfa),
                None => mfa.literal(UNKNOWN_MFA),
            };
            probes::process__spawn::fire(pid.id(self.term, cacheable(self.env, self.term)), start);
        }
    }

    /// procs `exit`: the tracee exits with reason TraceTerm.
    fn exit(&self) {
        if probes::process__exit::enabled() && !is_port(self.tracee) {
            let (mut pid, mut reason) = (IdBuf::new(), TextBuf::new());
            probes::process__exit::fire(self.tracee(&mut pid), reason.term(self.term));
        }
    }

    /// procs and ports `link`, `unlink`, `getting_linked`,
    /// `getting_unlinked`: the tracee and TraceTerm.
    fn link(&self, kind: Term<'a>) {
        let port = is_port(self.tracee);
        let listened = if port { probes::dtrace_port__link::enabled() } else { probes::dtrace_process__link::enabled() };
        if listened {
            let (mut me, mut other, mut k) = (IdBuf::new(), IdBuf::new(), TextBuf::new());
            let (me, other, k) = (self.tracee(&mut me), other.id(self.term, cacheable(self.env, self.term)), k.atom(self.env, kind));
            if port { probes::dtrace_port__link::fire(me, other, k) } else { probes::dtrace_process__link::fire(me, other, k) }
        }
    }

    /// procs `register`, `unregister`: the tracee and the name TraceTerm.
    fn register(&self, kind: Term<'a>) {
        if probes::dtrace_process__register::enabled() {
            let (mut me, mut name, mut k) = (IdBuf::new(), TextBuf::new(), TextBuf::new());
            probes::dtrace_process__register::fire(
                self.tracee(&mut me),
                name.atom(self.env, self.term),
                k.atom(self.env, kind),
            );
        }
    }

    /// ports `open`: TraceTerm (a pid) opened the tracee, with extra's name.
    fn port_open(&self) {
        if probes::port__open::enabled() {
            let (mut owner, mut name, mut port) = (IdBuf::new(), TextBuf::new(), IdBuf::new());
            let name = match self.extra() {
                Some(n) if matches!(n.get_type(), TermType::Atom) => name.atom(self.env, n),
                Some(n) => name.term(n),
                None => Str::NULL,
            };
            probes::port__open::fire(owner.id(self.term, cacheable(self.env, self.term)), name, self.tracee(&mut port));
        }
    }

    /// ports `closed`: the tracee exited with reason TraceTerm.
    fn port_closed(&self) {
        if probes::port__exit::enabled() {
            let (mut port, mut reason) = (IdBuf::new(), TextBuf::new());
            probes::port__exit::fire(Str::NULL, self.tracee(&mut port), Str::NULL, reason.term(self.term));
        }
    }

    /// running `in`, `in_exiting`: the tracee runs TraceTerm's mfa.
    fn scheduled(&self) {
        if probes::process__scheduled::enabled() && !is_port(self.tracee) {
            let (mut pid, mut mfa) = (IdBuf::new(), TextBuf::new());
            probes::process__scheduled::fire(self.tracee(&mut pid), self.mfa(self.term, &mut mfa));
        }
    }

    /// running `out`, `out_exiting`, `out_exited`: the tracee stops
    /// running; going out in `erlang:hibernate/3` is a hibernation.
    fn unscheduled(&self) {
        if is_port(self.tracee) {
            return;
        }
        let mut pid = IdBuf::new();
        let pid = self.tracee(&mut pid);
        if probes::process__hibernate::enabled()
            && let Some((m, f, 3)) = mfa_parts(self.term)
            && m.as_c_arg() == atoms::erlang().as_c_arg()
            && f.as_c_arg() == atoms::hibernate().as_c_arg()
        {
            let mut mfa = TextBuf::new();
            probes::process__hibernate::fire(pid, mfa.mfa(m, f, 3));
        }
        if probes::process__unscheduled::enabled() {
            probes::process__unscheduled::fire(pid);
        }
    }

    /// `send`, `send_to_non_existing_process`: the tracee sent message
    /// TraceTerm to extra (a pid, a registered name, `{Name, Node}`, a port).
    fn send(&self) {
        let local = probes::message__send::enabled();
        let remote = probes::message__send__remote::enabled();
        let Some(to) = self.extra() else { return };
        let (mut sender, mut receiver, mut node) = (IdBuf::new(), IdBuf::new(), TextBuf::new());
        match destination(self.env, to) {
            Destination::Local(to) if local => {
                let size = flat_size(self.term).map_or(UNAVAILABLE, |s| s as i64);
                let receiver = receiver.id(to, cacheable(self.env, to));
                probes::message__send::fire(
                    self.tracee(&mut sender),
                    receiver,
                    size,
                    UNAVAILABLE,
                    UNAVAILABLE,
                    UNAVAILABLE,
                );
            }
            Destination::Remote { node: n, receiver: r } if remote => {
                let size = flat_size(self.term).map_or(UNAVAILABLE, |s| s as i64);
                let node_text = match n {
                    Some(n) => node.atom(self.env, n),
                    None => node_of_pid(self.env, to, &mut node),
                };
                probes::message__send__remote::fire(
                    self.tracee(&mut sender),
                    node_text,
                    receiver.id(r, false),
                    size,
                    UNAVAILABLE,
                    UNAVAILABLE,
                    UNAVAILABLE,
                );
            }
            _ => {}
        }
    }

    /// `'receive'`: a message TraceTerm was queued to the tracee (a
    /// process), or a port received a command.
    fn receive(&self) {
        if is_port(self.tracee) {
            self.port_command();
        } else if probes::message__queued::enabled() {
            let mut receiver = IdBuf::new();
            let size = flat_size(self.term).map_or(UNAVAILABLE, |s| s as i64);
            probes::message__queued::fire(
                self.tracee(&mut receiver),
                size,
                UNAVAILABLE,
                UNAVAILABLE,
                UNAVAILABLE,
                UNAVAILABLE,
            );
        }
    }

    /// A port received `{Pid, {command, Data}}`, `{Pid, close}` or
    /// `{Pid, {connect, NewOwner}}`.
    fn port_command(&self) {
        if !probes::port__command::enabled() {
            return;
        }
        let Ok((from, what)) = self.term.decode::<(Term, Term)>() else { return };
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
        let (mut pid, mut port, mut k) = (IdBuf::new(), IdBuf::new(), TextBuf::new());
        probes::port__command::fire(
            pid.id(from, cacheable(self.env, from)),
            self.tracee(&mut port),
            Str::NULL,
            k.literal(kind),
        );
    }

    /// `call`: the tracee calls TraceTerm (`{M, F, Arity}` with the arity
    /// flag, or `{M, F, Args}`).
    fn call(&self) {
        let Some((m, f, a)) = mfa_parts(self.term) else { return };
        let (mut pid, mut mfa) = (IdBuf::new(), TextBuf::new());
        match call_kind(m.as_c_arg(), f.as_c_arg(), a) {
            CallKind::Bif if probes::bif__entry::enabled() => {
                probes::bif__entry::fire(self.tracee(&mut pid), mfa.mfa(m, f, a))
            }
            CallKind::Global if probes::global__function__entry::enabled() => {
                probes::global__function__entry::fire(self.tracee(&mut pid), mfa.mfa(m, f, a), UNAVAILABLE)
            }
            CallKind::Local if probes::local__function__entry::enabled() => {
                probes::local__function__entry::fire(self.tracee(&mut pid), mfa.mfa(m, f, a), UNAVAILABLE)
            }
            _ => {}
        }
    }

    /// `return_from`, `exception_from`: TraceTerm `{M, F, Arity}` returns
    /// to the tracee, or leaves with an exception.
    fn ret(&self) {
        let Some((m, f, a)) = mfa_parts(self.term) else { return };
        let (mut pid, mut mfa) = (IdBuf::new(), TextBuf::new());
        if call_kind(m.as_c_arg(), f.as_c_arg(), a) == CallKind::Bif {
            if probes::bif__return::enabled() {
                probes::bif__return::fire(self.tracee(&mut pid), mfa.mfa(m, f, a));
            }
        } else if probes::function__return::enabled() {
            probes::function__return::fire(self.tracee(&mut pid), mfa.mfa(m, f, a), UNAVAILABLE);
        }
    }

    /// `gc_*`: TraceTerm is a list of `{Key, Value}`; `wordsize` is the
    /// words needed (start) or reclaimed (end).
    fn gc(&self, enabled: fn() -> bool, fire: fn(Str<'_>, i64)) {
        if !enabled() || is_port(self.tracee) {
            return;
        }
        let words = gc_wordsize(self.term).unwrap_or(UNAVAILABLE);
        let mut pid = IdBuf::new();
        fire(self.tracee(&mut pid), words);
    }
}

/// `process__spawn` in automatic mode, without a trace flag on any
/// process: dtrace_vm meta-traces the three BIFs every local spawn goes
/// through (`erlang:spawn/3`, `spawn_link/3`, `spawn_opt/4`; `spawn/1`,
/// `spawn_monitor/1`, proc_lib and the rest call them) with the tracer
/// `{dtrace, spawn_meta}` and a `return_trace` match spec. The call event
/// carries the arguments (the mfa the new process starts in), the return
/// event the new pid. Both come from the calling process on the same
/// scheduler thread, one right after the other (the BIFs do not yield),
/// so the mfa waits in a per-thread slot keyed by the caller.
struct SpawnMeta;

/// The caller of the last spawn BIF on this thread and the mfa text.
type PendingSpawn = Option<(ErlNifTerm, KeptText)>;

thread_local! {
    static PENDING_SPAWN: std::cell::Cell<PendingSpawn> = const { std::cell::Cell::new(None) };
}

impl SpawnMeta {
    fn event(e: &Event<'_>, is_call: bool) {
        if !probes::process__spawn::enabled() && !otp_lttng::spawn_enabled() {
            return;
        }
        if is_call {
            // {erlang, spawn | spawn_link | spawn_opt, [M, F, Args | _]}
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
        } else {
            let Some((caller, text)) = PENDING_SPAWN.take() else { return };
            if caller != e.tracee.as_c_arg() {
                return;
            }
            // The new pid, or {Pid, MonitorRef} from spawn_opt/4 with monitor.
            let Some(ret) = e.extra() else { return };
            let pid = match ret.decode::<(Term, Term)>() {
                Ok((pid, _)) => pid,
                Err(_) => ret,
            };
            if !is_local_pid(e.env, pid) {
                return;
            }
            let (mut id, mut mfa) = (IdBuf::new(), TextBuf::new());
            let (pid, mfa) = (id.id(pid, true), mfa.kept(&text));
            if probes::process__spawn::enabled() {
                probes::process__spawn::fire(pid, mfa);
            }
            otp_lttng::spawn(e, pid, mfa);
        }
    }
}

/// `{wordsize, N}` among the first pairs of a GC event's list (OTP 25
/// puts it first).
fn gc_wordsize(list: Term<'_>) -> Option<i64> {
    let mut cell = list;
    for _ in 0..16 {
        let (head, tail) = cell.list_get_cell().ok()?;
        if let Ok((k, v)) = head.decode::<(Atom, i64)>()
            && k == atoms::wordsize()
        {
            return Some(v);
        }
        cell = tail;
    }
    None
}

/// `{M, F, Arity}` or `{M, F, Args}` (a list of at most 255 elements).
fn mfa_parts(mfa: Term<'_>) -> Option<(Term<'_>, Term<'_>, u32)> {
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

/// The length of a proper list, if at most `max`.
fn list_length(list: Term<'_>, max: u32) -> Option<u32> {
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
            Ok((name, node)) => Destination::Remote { node: Some(node.to_term(env)), receiver: name },
            Err(_) => Destination::Local(to),
        },
        _ => Destination::Local(to),
    }
}

/// Is `t` a local pid or a port (an immediate: its text can be cached)?
fn cacheable(env: Env<'_>, t: Term<'_>) -> bool {
    match t.get_type() {
        TermType::Pid => is_local_pid(env, t),
        TermType::Port => true,
        _ => false,
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

/// Is `t` a pid of this node (an immediate)?
fn is_local_pid(env: Env<'_>, t: Term<'_>) -> bool {
    let mut pid = std::mem::MaybeUninit::uninit();
    // SAFETY: enif_get_local_pid reads the term and writes the pid struct.
    matches!(t.get_type(), TermType::Pid)
        && unsafe { rustler::sys::enif_get_local_pid(env.as_c_arg(), t.as_c_arg(), pid.as_mut_ptr()) } != 0
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

/// A remote pid's node name into `buf`; NULL if it cannot be read.
fn node_of_pid<'b>(env: Env<'_>, pid: Term<'_>, buf: &'b mut TextBuf) -> Str<'b> {
    match pid_node(env, pid) {
        Some(node) => buf.atom(env, node.to_term(env)),
        None => Str::NULL,
    }
}


/// Which trace flags feed OTP's LTTng events.
#[derive(Clone, Copy)]
#[allow(dead_code)]
enum LttngGroup {
    Procs,
    Running,
    Send,
    Receive,
    Call,
    Gc,
    Ports,
    RunningPorts,
}

/// OTP's `org_erlang_dyntrace` LTTng events, with OTP's fields (its
/// runtime_tools `dyntrace.c` under `--with-dynamic-trace=lttng`): the
/// same erl_tracer events feed them. Where OTP passes a value this library
/// has too, it is the same: depth 0, `undefined` for an unknown mfa, the
/// GC figures from the event's list, link kinds `link`/`unlink` with the
/// two ends swapped for `getting_*`. Messages and reasons are `~p` text of
/// at most 64 terms and 255 bytes (OTP: 255 bytes).
#[cfg(dtrace_lttng)]
mod otp_lttng {
    use rustler::{Atom, Term};

    use super::{Event, LttngGroup, Tag, atoms, is_port, mfa_parts};
    use crate::lttng::otp::*;
    use crate::probes::Str;
    use crate::text::{IdBuf, TextBuf};

    /// Is a session recording an event of this group?
    pub(super) fn group_enabled(g: LttngGroup) -> bool {
        match g {
            LttngGroup::Procs => {
                process_link::enabled() || process_exit::enabled() || process_register::enabled()
            }
            LttngGroup::Running => process_scheduled::enabled(),
            LttngGroup::Send => message_send::enabled(),
            LttngGroup::Receive => message_receive::enabled(),
            LttngGroup::Call => {
                function_call::enabled() || function_return::enabled() || function_exception::enabled()
            }
            LttngGroup::Gc => {
                gc_minor_start::enabled()
                    || gc_minor_end::enabled()
                    || gc_major_start::enabled()
                    || gc_major_end::enabled()
            }
            LttngGroup::Ports => port_open::enabled() || port_exit::enabled() || port_link::enabled(),
            LttngGroup::RunningPorts => port_scheduled::enabled(),
        }
    }

    /// Is a session recording process_spawn?
    pub(super) fn spawn_enabled() -> bool {
        process_spawn::enabled()
    }

    /// An OTP event's name and its is-enabled check.
    type Listened = (&'static str, fn() -> bool);

    /// The OTP events a session records now, as `org_erlang_dyntrace:event`.
    pub(super) fn listened() -> Vec<String> {
        let events: [Listened; 18] = [
            ("process_spawn", process_spawn::enabled),
            ("process_link", process_link::enabled),
            ("process_exit", process_exit::enabled),
            ("process_register", process_register::enabled),
            ("process_scheduled", process_scheduled::enabled),
            ("port_open", port_open::enabled),
            ("port_exit", port_exit::enabled),
            ("port_link", port_link::enabled),
            ("port_scheduled", port_scheduled::enabled),
            ("function_call", function_call::enabled),
            ("function_return", function_return::enabled),
            ("function_exception", function_exception::enabled),
            ("message_send", message_send::enabled),
            ("message_receive", message_receive::enabled),
            ("gc_minor_start", gc_minor_start::enabled),
            ("gc_minor_end", gc_minor_end::enabled),
            ("gc_major_start", gc_major_start::enabled),
            ("gc_major_end", gc_major_end::enabled),
        ];
        events.iter().filter(|(_, on)| on()).map(|(n, _)| format!("org_erlang_dyntrace:{n}")).collect()
    }

    /// Would this event be recorded? For erl_tracer's `enabled/3`.
    pub(super) fn enabled(tag: Tag, spawn_meta: bool) -> bool {
        match tag {
            _ if spawn_meta => process_spawn::enabled(),
            Tag::Spawn => process_spawn::enabled(),
            Tag::Exit => process_exit::enabled(),
            Tag::Link => process_link::enabled() || port_link::enabled(),
            Tag::Register => process_register::enabled(),
            Tag::Open => port_open::enabled(),
            Tag::Closed => port_exit::enabled(),
            Tag::In | Tag::Out => process_scheduled::enabled() || port_scheduled::enabled(),
            Tag::Send => message_send::enabled(),
            Tag::Receive => message_receive::enabled(),
            Tag::Call => function_call::enabled(),
            Tag::Return => function_return::enabled() || function_exception::enabled(),
            // OTP's dyntrace ignores return_to (it names no probe).
            Tag::ReturnTo => false,
            Tag::GcMinorStart => gc_minor_start::enabled(),
            Tag::GcMajorStart => gc_major_start::enabled(),
            Tag::GcMinorEnd => gc_minor_end::enabled(),
            Tag::GcMajorEnd => gc_major_end::enabled(),
            Tag::Spawned | Tag::TraceStatus | Tag::Other => false,
        }
    }

    /// process_spawn from the spawn BIFs' meta tracing: the caller is the
    /// parent.
    pub(super) fn spawn(e: &Event<'_>, child: Str<'_>, mfa: Str<'_>) {
        if process_spawn::enabled() {
            let mut parent = IdBuf::new();
            process_spawn::fire(child.as_ptr(), e.tracee(&mut parent).as_ptr(), mfa.as_ptr());
        }
    }

    /// Records the OTP event(s) this erl_tracer event feeds, if a session
    /// records them.
    pub(super) fn emit(e: &Event<'_>, tag: Tag, tag_term: Term<'_>) {
        if !enabled(tag, false) {
            return;
        }
        let port = is_port(e.tracee);
        let (mut me, mut a, mut b) = (IdBuf::new(), TextBuf::new(), TextBuf::new());
        let me = e.tracee(&mut me);
        match tag {
            Tag::Spawn if process_spawn::enabled() => {
                let mut child = IdBuf::new();
                let entry = match e.extra() {
                    Some(x) => mfa_or_undefined(x, &mut a),
                    None => a.literal("undefined"),
                };
                process_spawn::fire(child.id(e.term, super::cacheable(e.env, e.term)).as_ptr(), me.as_ptr(), entry.as_ptr());
            }
            Tag::Exit if process_exit::enabled() && !port => {
                process_exit::fire(me.as_ptr(), a.term(e.term).as_ptr());
            }
            Tag::Link => {
                let mut other = IdBuf::new();
                let other = other.id(e.term, super::cacheable(e.env, e.term));
                let getting = tag_term.as_c_arg() == atoms::getting_linked().as_c_arg()
                    || tag_term.as_c_arg() == atoms::getting_unlinked().as_c_arg();
                let kind = if tag_term.as_c_arg() == atoms::link().as_c_arg()
                    || tag_term.as_c_arg() == atoms::getting_linked().as_c_arg()
                {
                    "link"
                } else {
                    "unlink"
                };
                let (from, to) = if getting { (other, me) } else { (me, other) };
                let kind = a.literal(kind);
                if port {
                    if port_link::enabled() {
                        port_link::fire(from.as_ptr(), to.as_ptr(), kind.as_ptr());
                    }
                } else if process_link::enabled() {
                    process_link::fire(from.as_ptr(), to.as_ptr(), kind.as_ptr());
                }
            }
            Tag::Register if process_register::enabled() => {
                process_register::fire(me.as_ptr(), a.atom(e.env, e.term).as_ptr(), b.atom(e.env, tag_term).as_ptr());
            }
            Tag::Open if port_open::enabled() => {
                let mut owner = IdBuf::new();
                let driver = match e.extra() {
                    Some(x) => a.term(x),
                    None => a.literal("undefined"),
                };
                port_open::fire(owner.id(e.term, super::cacheable(e.env, e.term)).as_ptr(), driver.as_ptr(), me.as_ptr());
            }
            Tag::Closed if port_exit::enabled() => {
                port_exit::fire(me.as_ptr(), a.term(e.term).as_ptr());
            }
            Tag::In | Tag::Out => {
                let kind = b.atom(e.env, tag_term);
                if port {
                    if port_scheduled::enabled() {
                        port_scheduled::fire(me.as_ptr(), a.term(e.term).as_ptr(), kind.as_ptr());
                    }
                } else if process_scheduled::enabled() {
                    process_scheduled::fire(me.as_ptr(), mfa_or_undefined(e.term, &mut a).as_ptr(), kind.as_ptr());
                }
            }
            Tag::Send if message_send::enabled() => {
                let to = match e.extra() {
                    Some(x) => b.term(x),
                    None => b.literal("undefined"),
                };
                message_send::fire(me.as_ptr(), to.as_ptr(), a.term(e.term).as_ptr());
            }
            Tag::Receive if message_receive::enabled() => {
                message_receive::fire(me.as_ptr(), a.term(e.term).as_ptr());
            }
            Tag::Call if function_call::enabled() => {
                function_call::fire(me.as_ptr(), mfa_or_undefined(e.term, &mut a).as_ptr(), 0);
            }
            Tag::Return => {
                let exception = tag_term.as_c_arg() == atoms::exception_from().as_c_arg();
                let mfa = mfa_or_undefined(e.term, &mut a);
                if exception {
                    if function_exception::enabled() {
                        // {Class, Value}: the class.
                        let class = match e.extra().and_then(|x| x.decode::<(Term, Term)>().ok()) {
                            Some((class, _)) => b.term(class),
                            None => b.literal("undefined"),
                        };
                        function_exception::fire(me.as_ptr(), mfa.as_ptr(), class.as_ptr());
                    }
                } else if function_return::enabled() {
                    function_return::fire(me.as_ptr(), mfa.as_ptr(), 0);
                }
            }
            Tag::GcMinorStart | Tag::GcMajorStart | Tag::GcMinorEnd | Tag::GcMajorEnd if !port => {
                let (words, heap, old_heap) = gc_figures(e.term);
                let fire = match tag {
                    Tag::GcMinorStart => gc_minor_start::fire,
                    Tag::GcMajorStart => gc_major_start::fire,
                    Tag::GcMinorEnd => gc_minor_end::fire,
                    _ => gc_major_end::fire,
                };
                fire(me.as_ptr(), words, heap, old_heap);
            }
            _ => {}
        }
    }

    /// `m:f/arity` of `{M, F, Arity | Args}`, else `undefined` (OTP's).
    fn mfa_or_undefined<'b>(mfa: Term<'_>, buf: &'b mut TextBuf) -> Str<'b> {
        match mfa_parts(mfa) {
            Some((m, f, a)) => buf.mfa(m, f, a),
            None => buf.literal("undefined"),
        }
    }

    /// (wordsize, heap_block_size, old_heap_block_size) of a GC event's
    /// list, 0 where absent.
    fn gc_figures(list: Term<'_>) -> (std::ffi::c_ulong, std::ffi::c_ulong, std::ffi::c_ulong) {
        let (mut words, mut heap, mut old) = (0, 0, 0);
        let mut cell = list;
        for _ in 0..32 {
            let Ok((head, tail)) = cell.list_get_cell() else { break };
            if let Ok((k, v)) = head.decode::<(Atom, u64)>() {
                if k == atoms::wordsize() {
                    words = v;
                } else if k == atoms::heap_block_size() {
                    heap = v;
                } else if k == atoms::old_heap_block_size() {
                    old = v;
                }
            }
            cell = tail;
        }
        (words as _, heap as _, old as _)
    }
}

/// Without the LTTng sink: no OTP event is ever recorded.
#[cfg(not(dtrace_lttng))]
mod otp_lttng {
    use rustler::Term;

    use super::{Event, LttngGroup, Tag};
    use crate::probes::Str;

    pub(super) fn group_enabled(_g: LttngGroup) -> bool {
        false
    }
    pub(super) fn spawn_enabled() -> bool {
        false
    }
    pub(super) fn listened() -> Vec<String> {
        Vec::new()
    }
    pub(super) fn enabled(_tag: Tag, _spawn_meta: bool) -> bool {
        false
    }
    pub(super) fn spawn(_e: &Event<'_>, _child: Str<'_>, _mfa: Str<'_>) {}
    pub(super) fn emit(_e: &Event<'_>, _tag: Tag, _tag_term: Term<'_>) {}
}
