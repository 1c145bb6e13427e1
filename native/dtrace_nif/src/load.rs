//! The library's load steps. Each part of the library that needs one
//! registers it beside its own code, as its NIFs are registered
//! (`inventory::submit!`); the library's `load` and `upgrade` callbacks
//! (entry.rs) run them all, in the order of [`order`]. Nothing here names a
//! family, so no family depends on another through its load step.

use rustler::Env;

/// One load step: `run` makes what its part needs before any NIF is called
/// (atoms, tables, a resource type). It runs again on every `upgrade` (a
/// new version of module `dtrace_nif` taking the library over), so it is
/// idempotent. `false` refuses the load.
pub(crate) struct LoadStep {
    /// Where it runs among the steps: one of [`order`]'s constants.
    pub(crate) order: u8,
    /// The step's work.
    pub(crate) run: fn(Env<'_>) -> bool,
}

inventory::collect!(LoadStep);

/// The steps' order: the atoms and immediates every family compares with,
/// then what the probes read (the binary size of this VM, the declared-only
/// sites, the LTTng sink), then each family's tables.
pub(crate) mod order {
    /// args.rs: the atoms and immediates compared with.
    pub(crate) const ARGS: u8 = 10;
    /// flat_size.rs: the running VM's binary sizes.
    pub(crate) const FLAT_SIZE: u8 = 20;
    /// probes.rs: OTP's probes no event feeds keep their sites and notes.
    pub(crate) const DECLARED_SITES: u8 = 30;
    /// lttng.rs: the LTTng-UST sink, if it can be opened.
    pub(crate) const LTTNG: u8 = 40;
    /// provider/nifs.rs: the run-time providers' resource type.
    pub(crate) const PROVIDER: u8 = 50;
    /// efile.rs: the errno atoms.
    pub(crate) const EFILE: u8 = 60;
    /// vm/mod.rs: the trace tags' atoms.
    pub(crate) const VM: u8 = 70;
}

/// Runs every registered step in [`order`], all of them even after one
/// failed (each always succeeds but the provider's resource type, which
/// ran first of the families' steps before these were registered), and
/// says whether all succeeded.
pub(crate) fn run(env: Env<'_>) -> bool {
    let mut steps: Vec<&LoadStep> = inventory::iter::<LoadStep>().collect();
    steps.sort_by_key(|step| step.order);
    debug_assert!(steps.windows(2).all(|pair| pair[0].order != pair[1].order), "two load steps share an order");
    let mut all = true;
    for step in steps {
        all &= (step.run)(env);
    }
    all
}
