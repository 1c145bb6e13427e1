//! Scheduling of processes (the `running` and `exiting` flags).

use rustler::Atom;

use super::event::{Event, TraceTag, UNDEFINED, UNKNOWN_MFA, mfa_parts, mfa_text};
use crate::probes::org_erlang_dyntrace::process_scheduled;
use crate::probes::{process__hibernate, process__scheduled, process__unscheduled};
use crate::text::TextBuf;

mod atoms {
    rustler::atoms! { erlang, hibernate }
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
/// in `erlang:hibernate/3` is a hibernation too.
pub(crate) fn unscheduled(e: &Event<'_>, _tag: TraceTag) {
    let mut pid = TextBuf::new();
    let pid = e.tracee(&mut pid);
    // Nested, not a let chain: the crates build with Rust 1.85 (Debian 13).
    if process__hibernate::enabled() {
        if let Some((m, f, 3)) = mfa_parts(e.term) {
            if m.decode::<Atom>().is_ok_and(|m| m == atoms::erlang())
                && f.decode::<Atom>().is_ok_and(|f| f == atoms::hibernate())
            {
                let mut mfa = TextBuf::new();
                process__hibernate::fire(pid, mfa.mfa(m, f, 3));
            }
        }
    }
    process__unscheduled::fire(pid);
    otp_scheduled(e, pid);
}

/// OTP's `process_scheduled`: the mfa (or `undefined`) and the trace tag.
fn otp_scheduled(e: &Event<'_>, pid: crate::probes::Str<'_>) {
    if process_scheduled::enabled() {
        let (mut mfa, mut kind) = (TextBuf::new(), TextBuf::new());
        process_scheduled::fire(pid, mfa_text(e.term, UNDEFINED, &mut mfa), e.tag_name(&mut kind));
    }
}
