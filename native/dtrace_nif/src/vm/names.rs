//! Process names (`dtrace_process__name`, not OTP's): `dtrace_names` asks
//! whether, and how many, tracers listen, and fires the probe for each
//! process it names. The names themselves are found in Erlang (registered
//! name, label, dictionary, initial call): a tracer callback cannot read
//! them.

use rustler::{Binary, Term, TermType};

use crate::probes::dtrace_process__name;
use crate::text::TextBuf;

/// `process_names() -> false | pos_integer()`: `false` while no tracer
/// listens to `dtrace_process__name`; else how many do, by its SDT
/// semaphore (each tracer raises it by one; at least 1 for DOF and LTTng,
/// which do not count): `dtrace_names` names every process again when it
/// rises.
#[rustler::nif]
fn process_names(env: rustler::Env<'_>) -> Term<'_> {
    use rustler::Encoder;
    if !dtrace_process__name::enabled() {
        return false.encode(env);
    }
    listeners().max(1).encode(env)
}

/// The probe's SDT semaphore: how many tracers attached it.
#[cfg(dtrace_sdt)]
fn listeners() -> u32 {
    u32::from(dtrace_process__name::SEMAPHORE.load(std::sync::atomic::Ordering::Relaxed))
}

/// No SDT sites on this platform (DOF and LTTng do not count).
#[cfg(not(dtrace_sdt))]
fn listeners() -> u32 {
    1
}

/// `process_name(Pid, Name :: binary()) -> boolean()`: fires
/// `dtrace_process__name` with the pid and the name (cut at 255 bytes)
/// if it listens; `false` when it does not, or for a non-pid or
/// non-binary.
#[rustler::nif]
fn process_name(pid: Term<'_>, name: Term<'_>) -> bool {
    if !dtrace_process__name::enabled() || pid.get_type() != TermType::Pid {
        return false;
    }
    let Ok(name) = name.decode::<Binary>() else { return false };
    let (mut p, mut n) = (TextBuf::new(), TextBuf::new());
    dtrace_process__name::fire(p.term(pid), n.bytes(name.as_slice()));
    true
}
