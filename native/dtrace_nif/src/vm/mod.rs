//! The VM's own probes (`process__spawn`, `message__send`, `gc_minor__start`,
//! ...) and OTP's LTTng events for them (`org_erlang_dyntrace:*`), fed from
//! erl_tracer events: the NIF callbacks a stock VM calls for a process or
//! port traced with `{tracer, dtrace_tracer, State}` (module
//! `dtrace_tracer` forwards them here, see `native/tracer_nif`).
//!
//! The feed table of `probes.d` (`#pragma dtrace_nif feed`) says which
//! trace flags and trace tags feed which probes and events, through which
//! formatting function; build.rs turns it into `feeds.rs` (included below):
//! - `enabled/3` answers `trace` only when a probe or event the event would
//!   fire has a listener (`listens`), else `discard`, so an event nobody
//!   listens to costs the VM one callback;
//! - `trace/5` runs the formatting function of each row the event is in
//!   (`dispatch`), which fires those of the row's probes and events that
//!   listen, each checking its own state again;
//! - `vm_listening/0` tells `dtrace_vm` (automatic mode) the flags to set
//!   now (`wanted_flags`), and `vm_flags/0` every flag it may ever set.
//!
//! Only the generic pair is exported: OTP 25 calls an exported
//! `trace_call/5` or `trace_send/5` with the wrong arguments in some cases
//! (meta and port-send tracing), and the generic callbacks get the real
//! trace tag anyway. Adding a VM probe: a row in `probes.d` and its
//! formatting function in one of the files below.

use std::sync::OnceLock;

use rustler::sys::ErlNifTerm;
use rustler::types::atom::ok;
use rustler::{Atom, Encoder, Env, Term, TermType};

use crate::entry::raw_nif;
use crate::nif::{NifArgs, NifCall, nif_args};
use crate::text::TextBuf;

mod calls;
mod event;
mod function_spans;
mod gc;
mod messages;
mod monitors;
mod names;
mod ports;
mod procs;
mod running;
mod spans;

/// The formatting functions the feed table names, for `feeds.rs`.
mod fmt {
    pub(super) use super::calls::{call, call_return};
    pub(super) use super::gc::{gc, heap_size};
    pub(super) use super::messages::{port_command, queued, send, send_code, send_large};
    pub(super) use super::monitors::{busy_dist_port, busy_port, dist_monitor};
    pub(super) use super::ports::{port_exit, port_link, port_open, port_receive, port_scheduled};
    pub(super) use super::procs::{exit, exit_signal, link, register, spawn, spawn_meta, unlink};
    pub(super) use super::running::{scheduled, unscheduled};
    pub(super) use super::spans::{span_gc, span_receive, span_scheduled, span_send};
}

use event::{Event, TRACE_TAGS, Target, TraceTag, atoms};

include!(concat!(env!("OUT_DIR"), "/feeds.rs"));

// erl_tracer's callbacks: NIFs of the tracer modules (`dtrace`,
// `dyntrace`), not of `dtrace_nif` (entry.rs, `dtrace_erl_tracer_nifs`).
raw_nif!(tracer "enabled", EnabledArgs => enabled);
raw_nif!(tracer "trace", TraceArgs => trace);

nif_args!(
    /// erl_tracer's `enabled(TraceTag, TracerState, Tracee)`.
    EnabledArgs { trace_tag, tracer_state, tracee }
);
nif_args!(
    /// erl_tracer's `trace(TraceTag, TracerState, Tracee, TraceTerm, Opts)`.
    TraceArgs { trace_tag, tracer_state, tracee, trace_term, opts }
);

/// The trace tags of the feed table by their atom (atoms are immediates:
/// compared as raw terms), most frequent first.
static TAGS: OnceLock<Vec<(ErlNifTerm, TraceTag)>> = OnceLock::new();

inventory::submit!(crate::load::LoadStep { order: crate::load::order::VM, run: load });

/// The family's load step: the trace tags' atoms.
fn load(env: Env<'_>) -> bool {
    let _ = TAGS.get_or_init(|| {
        TRACE_TAGS
            .iter()
            .filter_map(|&(name, tag)| Atom::from_str(env, name).ok().map(|a| (a.as_c_arg(), tag)))
            .collect()
    });
    true
}

fn trace_tag_of(term: ErlNifTerm) -> Option<TraceTag> {
    TAGS.get().and_then(|t| t.iter().find(|(a, _)| *a == term)).map(|&(_, t)| t)
}

/// What an event is about: meta tracing of the spawn BIFs (the tracer
/// state `spawn_meta`), a process in a span (`span`), a monitor's message
/// (`node_monitor`, `system_monitor`: `vm_monitor_event/4`), a port, or a
/// process.
fn target_of(tracer_state: ErlNifTerm, tracee_is_port: bool) -> Target {
    if tracer_state == atoms::spawn_meta().as_c_arg() {
        Target::SpawnMeta
    } else if tracer_state == atoms::span().as_c_arg() {
        Target::Spans
    } else if tracer_state == atoms::node_monitor().as_c_arg() {
        Target::NodeMonitor
    } else if tracer_state == atoms::system_monitor().as_c_arg() {
        Target::SystemMonitor
    } else if tracer_state == atoms::exit_meta().as_c_arg() {
        Target::ExitMeta
    } else if tracee_is_port {
        Target::Ports
    } else {
        Target::Processes
    }
}

/// `enabled(TraceTag, TracerState, Tracee) -> trace | discard`: `trace`
/// when a probe or event this event would fire has a listener.
/// `trace_status` (is the tracer still there?) is always `trace`.
fn enabled(call: NifCall) -> ErlNifTerm {
    let Some(a) = call.raw::<EnabledArgs<ErlNifTerm>>() else { return atoms::discard().as_c_arg() };
    if a.trace_tag == atoms::trace_status().as_c_arg() {
        return atoms::trace().as_c_arg();
    }
    let listened = trace_tag_of(a.trace_tag).is_some_and(|tag| {
        let target = target_of(a.tracer_state, call.is_port(a.tracee));
        listens(target, tag)
            || (target == Target::Ports && names_port(tag) && port_names_wanted())
            || (target == Target::Processes && function_spans::feeds(tag))
    });
    if listened { atoms::trace() } else { atoms::discard() }.as_c_arg()
}

/// `trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) -> ok`: runs the
/// formatting functions of the rows this event is in.
fn trace(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| {
        let Some(a) = TraceArgs::from_slice(args) else { return ok().encode(env) };
        if let Some(tag) = trace_tag_of(a.trace_tag.as_c_arg()) {
            let target = target_of(a.tracer_state.as_c_arg(), a.tracee.get_type() == TermType::Port);
            let event = Event {
                env,
                trace_tag: a.trace_tag,
                tracer_state: a.tracer_state,
                tracee: a.tracee,
                term: a.trace_term,
                opts: a.opts,
            };
            let names = target == Target::Ports && names_port(tag) && port_names_wanted();
            if names && tag == TraceTag::Open {
                ports::remember(&event);
            }
            if target == Target::Processes && function_spans::feeds(tag) {
                function_spans::event(&event, tag);
            }
            dispatch(target, tag, &event);
            if names && tag == TraceTag::Closed {
                ports::forget(&event);
            }
        }
        ok().encode(env)
    })
}

/// A port's `open` and `closed` events keep and forget the name it was
/// opened with (`port_names`).
fn names_port(tag: TraceTag) -> bool {
    matches!(tag, TraceTag::Open | TraceTag::Closed)
}

/// Is a probe that names a port by the name it was opened with (or by its
/// owner) listening? Then ports' `open` and `closed` events are wanted
/// even when nobody listens to `port__open`.
fn port_names_wanted() -> bool {
    use crate::probes::*;
    port__command::enabled()
        || port__exit::enabled()
        || port__control::enabled()
        || port__connect::enabled()
        || driver__output::enabled()
        || driver__outputv::enabled()
        || driver__control::enabled()
        || driver__call::enabled()
        || driver__timeout::enabled()
}

/// `vm_listening() -> {ProcessFlags, PortFlags, Listened, Sources}`: the
/// trace flags automatic mode sets now, the names (binaries) of all the
/// library's probes and events that have a listener (SDT note names, and
/// LTTng events as `provider:event`), and the sources without trace flags
/// whose rows have one: `spawn` (the spawn BIFs' meta patterns),
/// `node_monitor`, `system_monitor`, `exit_meta` (a meta pattern on
/// `erlang:exit/2`), and `send_code` (the send match spec of
/// `dtrace_message__send_code`).
#[rustler::nif]
fn vm_listening(env: Env<'_>) -> Term<'_> {
    let atoms = |flags: Vec<&str>| -> Vec<Atom> { flags.iter().filter_map(|f| Atom::from_str(env, f).ok()).collect() };
    let mut sources = sources_listening();
    if crate::probes::dtrace_message__send_code::enabled() {
        // The send match spec that gives the sender's stack (dtrace_vm).
        sources.push("send_code");
    }
    let meta: Vec<Atom> = atoms(sources);
    let mut port_flags = wanted_flags(Target::Ports);
    if port_names_wanted() && !port_flags.contains(&"ports") {
        // port__command's port name comes from the port's `open` event.
        port_flags.push("ports");
    }
    (atoms(wanted_flags(Target::Processes)), atoms(port_flags), crate::probes::listened(), meta).encode(env)
}

/// `vm_mode(Manual :: boolean()) -> boolean()`: fires `dtrace_vm__mode`
/// with "manual" or "auto" if a tracer listens (dtrace_vm's poll calls
/// it, so that a script that needs automatic mode can warn); `false` when
/// nobody listens.
#[rustler::nif]
fn vm_mode(manual: bool) -> bool {
    if !crate::probes::dtrace_vm__mode::enabled() {
        return false;
    }
    let mut mode = TextBuf::new();
    crate::probes::dtrace_vm__mode::fire(mode.literal(if manual { "manual" } else { "auto" }));
    true
}

/// `span_vm_flags() -> [atom()]`: the trace flags `dtrace:span/2` gives
/// the process of an outermost span now (with the tracer `{dtrace_tracer, span}`):
/// those of the `on=spans` rows that have a listener; `[]` when none has.
#[rustler::nif]
fn span_vm_flags(env: Env<'_>) -> Vec<Atom> {
    wanted_flags(Target::Spans).iter().filter_map(|f| Atom::from_str(env, f).ok()).collect()
}

/// `vm_port_name(Port, Name, Owner) -> boolean()`: keeps the name `Port`
/// was opened with (a binary, `erlang:port_info(Port, name)`) and the
/// process connected to it, for `port__command` and `port__exit`, as the
/// port's `open` event does; `dtrace_vm` calls it for the ports already
/// open when it starts tracing ports. `false` if the table has no room (or
/// the arguments are not a port, a binary and a pid).
#[rustler::nif]
fn vm_port_name(port: Term<'_>, name: Term<'_>, owner: Term<'_>) -> bool {
    let Ok(name) = name.decode::<rustler::Binary>() else { return false };
    if port.get_type() != TermType::Port || owner.get_type() != TermType::Pid {
        return false;
    }
    let (mut p, mut o) = (TextBuf::new(), TextBuf::new());
    let _ = (p.term(port), o.term(owner));
    crate::port_names::insert(p.text(), o.text(), name.as_slice())
}

/// `vm_monitor_event(Source, Tag, Subject, Info) -> boolean()`: a message
/// `dtrace_vm` got from a monitor, through the feed table as an event of
/// target `Source` (`node_monitor`, `system_monitor`) with trace tag `Tag`,
/// tracee `Subject` and term `Info` (see `vm/monitors.rs`); `false` when
/// no row of it listens (or `Source` or `Tag` is unknown).
#[rustler::nif]
fn vm_monitor_event<'a>(env: Env<'a>, source: Term<'a>, tag: Term<'a>, subject: Term<'a>, info: Term<'a>) -> bool {
    let target = target_of(source.as_c_arg(), false);
    if !matches!(target, Target::NodeMonitor | Target::SystemMonitor) {
        return false;
    }
    let Some(t) = trace_tag_of(tag.as_c_arg()) else { return false };
    if !listens(target, t) {
        return false;
    }
    let event =
        Event { env, trace_tag: tag, tracer_state: source, tracee: subject, term: info, opts: Term::map_new(env) };
    dispatch(target, t, &event);
    true
}

/// `vm_flags() -> {ProcessFlags, PortFlags}`: every trace flag automatic
/// mode may set, from the feed table (what `dtrace_vm` clears after a
/// crash of its predecessor).
#[rustler::nif]
fn vm_flags(env: Env<'_>) -> Term<'_> {
    let atoms = |flags: &[&str]| -> Vec<Atom> { flags.iter().filter_map(|f| Atom::from_str(env, f).ok()).collect() };
    (atoms(ALL_PROCESS_FLAGS), atoms(ALL_PORT_FLAGS)).encode(env)
}
