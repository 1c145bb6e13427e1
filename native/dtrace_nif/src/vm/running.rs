//! Scheduling of processes (the `running` and `exiting` flags).

use rustler::Atom;

use super::event::{Event, TraceTag, UNDEFINED, UNKNOWN_MFA, mfa_parts, mfa_text};
use crate::probes::org_erlang_dyntrace::process_scheduled;
use crate::probes::{process__hibernate, process__scheduled, process__unscheduled};
use crate::text::TextBuf;

mod atoms {
    rustler::atoms! { erlang, hibernate, gen_server, gen_statem, loop_hibernate }
}

/// `in`, `in_exiting`: the tracee runs TraceTerm's mfa.
pub(crate) fn scheduled(e: &Event<'_>, _tag: TraceTag) {
    let mut pid = TextBuf::new();
    let pid = e.tracee(&mut pid);
    if process__scheduled::enabled() {
        let mut mfa = TextBuf::new();
        process__scheduled::fire(pid, mfa_text(e.term, UNKNOWN_MFA, &mut mfa));
    }
    otp_scheduled(e, pid);
}

/// `out`, `out_exiting`, `out_exited`: the tracee stops running; going out
/// in a hibernation (`hibernating`) fires `process__hibernate` first.
pub(crate) fn unscheduled(e: &Event<'_>, _tag: TraceTag) {
    let mut pid = TextBuf::new();
    let pid = e.tracee(&mut pid);
    if process__hibernate::enabled() {
        if let Some((m, f, a)) = mfa_parts(e.term) {
            if hibernating(m, f, a) {
                let mut mfa = TextBuf::new();
                process__hibernate::fire(pid, mfa.mfa(m, f, a));
            }
        }
    }
    process__unscheduled::fire(pid);
    otp_scheduled(e, pid);
}

/// Is going out in `m:f/a` a hibernation? In `erlang:hibernate/3`, always;
/// `erlang:hibernate/0` (OTP 28+) leaves no mark of its own: the event names
/// its caller, so the callers OTP's behaviours hibernate through are known
/// by name (`gen_server:loop_hibernate/4`, `gen_statem:loop_hibernate/3` in
/// OTP 28 and 29; any arity, as they may change), and other callers of
/// `hibernate/0` look like a wait in a `receive` (docs/vm-probes.md).
fn hibernating(m: rustler::Term<'_>, f: rustler::Term<'_>, a: u32) -> bool {
    let (Ok(m), Ok(f)) = (m.decode::<Atom>(), f.decode::<Atom>()) else { return false };
    (m == atoms::erlang() && f == atoms::hibernate() && a == 3)
        || ((m == atoms::gen_server() || m == atoms::gen_statem()) && f == atoms::loop_hibernate())
}

/// OTP's `process_scheduled`: the mfa (or `undefined`) and the trace tag.
fn otp_scheduled(e: &Event<'_>, pid: crate::probes::Str<'_>) {
    if process_scheduled::enabled() {
        let (mut mfa, mut kind) = (TextBuf::new(), TextBuf::new());
        process_scheduled::fire(pid, mfa_text(e.term, UNDEFINED, &mut mfa), e.tag_name(&mut kind));
    }
}
