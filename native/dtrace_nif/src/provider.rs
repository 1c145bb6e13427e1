//! Run-time providers (`dtrace_provider`): a provider and its probes named
//! by the application while the node runs, seen by tracers like any
//! compiled-in probe.
//!
//! Defining one ([`Provider::new`]) writes an ELF shared object with one
//! site and one semaphore per probe ([`crate::sdt_object`]) into the node's
//! private directory and opens it with `dlopen`; the object's notes are the
//! catalogue's ([`dtrace_catalogue::Arch::note_args`]): argument k in the
//! same register as in every compiled-in probe. Firing a probe reads its
//! semaphore and, while a tracer listens, calls its site with each
//! argument in its register ([`Probe::fire`]).
//!
//! Where DTrace's helper device exists, the provider is also registered
//! with DTrace as DOF (module [`crate::dof`]), written into the object's
//! `.dtrace_dof` once it is loaded, so that `myprov*:::` finds it; each
//! probe then also asks its is-enabled site, where DTrace writes 1 while it
//! listens. The DOF is taken back when the provider is deleted.
//!
//! # Files
//! The node's objects live in one private directory, created with mode 0700
//! by `mkdtemp` on first use: `$TMPDIR/dtrace-<OS pid>-XXXXXX/`
//! (`/tmp` without `TMPDIR`), one file `<provider>.<n>.so` per definition.
//! A real file, not a memfd: gdb hangs on `/proc/self/fd/N` (it opens its
//! own descriptor N) and perf cannot resolve `/proc/<pid>/fd/N`. A file is
//! removed when its provider is deleted or dropped, the directory when the
//! process exits (an `atexit` handler), and, when a node first defines a
//! provider, the directories of nodes that are no longer running (same
//! user, name `dtrace-<pid>-*`, pid gone) are removed with their objects.
//!
//! # Lifetime
//! [`Provider::delete`] marks the provider deleted (fires return at once),
//! removes its file and frees its name; the object stays mapped until the
//! `Provider` is dropped, which `dlclose`s it. The NIF layer keeps a
//! provider in an `Arc` owned by its handles (resources), and every NIF
//! that fires receives a handle, which the VM keeps alive for the whole
//! call: so no scheduler can be inside a site, or reading a semaphore, when
//! the object is unmapped. A file removed on `delete` cannot be attached to
//! afterwards; tracers already attached stay attached and see nothing more.

mod dir;
mod model;
mod object;
// The calls into a site: one backend per file, chosen by the target.
#[cfg_attr(all(dtrace_sdt, target_arch = "x86_64"), path = "provider/site/x86_64.rs")]
#[cfg_attr(all(dtrace_sdt, target_arch = "aarch64"), path = "provider/site/aarch64.rs")]
#[cfg_attr(not(dtrace_sdt), path = "provider/site/none.rs")]
mod site;

#[cfg(not(test))]
pub(crate) mod nifs;
#[cfg(all(test, dtrace_sdt))]
mod tests;

pub use dir::{private_dir, remove_stale_dirs};
pub use model::*;
pub use object::{Probe, Provider, Registers, loaded};
