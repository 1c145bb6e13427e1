//! The NIFs behind `dtrace_provider` (internal functions of module
//! `dtrace`). Left out of unit-test builds, which never call into the VM.
//!
//! A handle is a NIF resource holding an `Arc` of the provider (and, for a
//! probe handle, the probe's index); the provider is dropped, and its
//! object closed, when the last handle is garbage-collected. The resource
//! type is registered here rather than through rustler's `Resource`,
//! because rustler finds a resource's type through a `TypeId`-keyed hash
//! map on every decode, about as long again as the whole disabled path of
//! `fire`; here the type is one pointer, read once per call.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering::Acquire, Ordering::Release};

use dtrace_catalogue::{MAX_ARGS, Type};
use rustler::sys::{
    ErlNifEnv, ErlNifResourceFlags, ErlNifResourceType, ErlNifTerm, enif_alloc_resource, enif_get_resource,
    enif_make_badarg, enif_make_resource, enif_open_resource_type, enif_release_resource,
};
use rustler::types::atom::{false_, ok, true_};
use rustler::types::binary::NewBinary;
use rustler::{Atom, Encoder, Env, Term};

use super::{Invalid, MAX_NAME_BYTES, MAX_PROBES, MAX_PROVIDERS, NewError, Probe, ProbeDef, Provider, Registers};
use crate::args::{Bytes, StrBuf, int64_or_zero, read_iolist};
use crate::entry::raw_nif;
use crate::nif::{NifArgs, NifCall, nif_args};

// The hot NIFs (fire, is-enabled) are raw: no argument Vec, nothing
// decoded before the handle is found. The others are rustler's.
raw_nif!("provider_fire", FireArgs => provider_fire);
raw_nif!("provider_fire", ProbeFireArgs => probe_fire);
raw_nif!("provider_is_enabled", IsEnabledArgs => provider_is_enabled);
raw_nif!("provider_is_enabled", ProbeArgs => probe_is_enabled);
raw_nif!("provider_is_enabled", CheckedArgs => provider_is_enabled_checked);
raw_nif!("provider_probe_is_enabled", ProbeCheckedArgs => probe_is_enabled_checked);

nif_args!(
    /// `provider_fire(Handle, ProbeName, Args)`.
    FireArgs { handle, probe_name, args }
);
nif_args!(
    /// `provider_fire(ProbeHandle, Args)`.
    ProbeFireArgs { probe, args }
);
nif_args!(
    /// `provider_is_enabled(Handle, ProbeName)`.
    IsEnabledArgs { handle, probe_name }
);
nif_args!(
    /// `provider_is_enabled(ProbeHandle)`.
    ProbeArgs { probe }
);
nif_args!(
    /// `provider_is_enabled(Handle, ProbeName, ArgCount)`.
    CheckedArgs { handle, probe_name, arg_count }
);
nif_args!(
    /// `provider_probe_is_enabled(ProbeHandle, ArgCount)`.
    ProbeCheckedArgs { probe, arg_count }
);

rustler::atoms! {
    int,
    string,
    unavailable,
    invalid_provider_name,
    invalid_probes,
    no_probes,
    invalid_probe,
    invalid_probe_name,
    invalid_arg_type,
    too_many_args,
    duplicate_probe,
    too_many_probes,
    already_defined,
    too_many_providers,
    file_error,
    dlopen_failed,
}

/// A provider with its probes' name atoms, sorted by the atoms' raw
/// values. Atoms are immediates, the same value in every env for the
/// life of the VM, so a probe is found by comparing raw terms.
struct Shared {
    provider: Provider,
    by_atom: Box<[(ErlNifTerm, usize)]>,
}

impl Shared {
    /// The probe whose name is the atom `name`.
    #[inline]
    fn probe(&self, name: Term<'_>) -> Option<&Probe> {
        let raw = name.as_c_arg();
        let i = self.by_atom.binary_search_by_key(&raw, |&(atom, _)| atom).ok()?;
        self.provider.probes().get(self.by_atom[i].1)
    }
}

/// What a handle term holds: a provider, or one of its probes.
struct Handle {
    shared: Arc<Shared>,
    /// `None` for a provider handle; the probe's index for a probe handle.
    probe: Option<usize>,
}

/// The resource type of handles, opened when the library is loaded.
static HANDLE_TYPE: AtomicPtr<ErlNifResourceType> = AtomicPtr::new(ptr::null_mut());

/// Bytes asked of the VM per handle: room to align a `Handle` anywhere
/// in them.
const HANDLE_BYTES: usize = size_of::<Handle>() + align_of::<Handle>();

/// The `Handle` in a resource's memory (`HANDLE_BYTES` bytes at `raw`).
fn slot(raw: *const c_void) -> *mut Handle {
    let align = align_of::<Handle>();
    let pad = (align - raw as usize % align) % align;
    raw.cast::<u8>().wrapping_add(pad).cast::<Handle>().cast_mut()
}

/// The resource destructor: drops the handle (and, with the last one,
/// the provider, which closes its object).
unsafe extern "C" fn drop_handle(_env: *mut ErlNifEnv, raw: *mut c_void) {
    // SAFETY: the VM calls this once per resource of our type, after
    // its last reference is gone; `make_handle` wrote a Handle at
    // `slot(raw)`, and nothing reads it any more.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { ptr::drop_in_place(slot(raw)) }));
}

inventory::submit!(crate::load::LoadStep { order: crate::load::order::PROVIDER, run: load });

/// Library load and upgrade: opens the handle type, or takes it over
/// from the module version that opened it (an upgrade: a new version of
/// module `dtrace_nif`, which owns this library, loaded while the old one
/// is there). Without the
/// takeover, purging the old version would free the type (no handles)
/// or orphan it (handles alive).
///
/// After `code:delete(dtrace_nif)` and a purge, though, the type is out of
/// the VM's list (freed, or orphaned while handles of it live): the next
/// load creates a new one, and handles made before are no longer
/// recognised (calls with them raise `badarg`; they are still unloaded
/// when collected).
fn load(env: Env<'_>) -> bool {
    let open = |flags| {
        let mut tried = ErlNifResourceFlags::ERL_NIF_RT_CREATE;
        // SAFETY: called from the load callback with its env; the name
        // is a NUL-terminated literal, the destructor a function of
        // this library with the signature the VM calls.
        unsafe {
            enif_open_resource_type(
                env.as_c_arg(),
                ptr::null(),
                c"dtrace_provider_handle".as_ptr(),
                Some(drop_handle),
                flags,
                &mut tried,
            )
        }
    };
    let mut ty = open(ErlNifResourceFlags::ERL_NIF_RT_CREATE);
    if ty.is_null() {
        ty = open(ErlNifResourceFlags::ERL_NIF_RT_TAKEOVER);
    }
    HANDLE_TYPE.store(ty.cast_mut(), Release);
    !ty.is_null()
}

/// A new handle term owning `handle`.
fn make_handle(env: Env<'_>, handle: Handle) -> Term<'_> {
    let ty = HANDLE_TYPE.load(Acquire);
    // SAFETY: `ty` is our resource type (the library loaded, so it is
    // set). The VM returns HANDLE_BYTES writable bytes; `slot` is
    // aligned within them, so the Handle fits; the term made keeps the
    // resource, and the release gives up our reference, so the VM
    // frees it (calling drop_handle) with the last term.
    unsafe {
        let raw = enif_alloc_resource(ty, HANDLE_BYTES);
        ptr::write(slot(raw), handle);
        let term = enif_make_resource(env.as_c_arg(), raw);
        enif_release_resource(raw);
        Term::new(env, term)
    }
}

/// The handle `term` stands for, if it is one.
#[inline(always)]
fn handle_of(term: Term<'_>) -> Option<&Handle> {
    let ty = HANDLE_TYPE.load(Acquire);
    let mut raw: *const c_void = ptr::null();
    // SAFETY: a term of the calling env and our resource type;
    // `enif_get_resource` only fills `raw`, when the term is one of
    // ours. Such a resource holds a Handle (make_handle) and lives at
    // least as long as the term, which the VM keeps for the whole
    // call ('a is the call's env): no destructor can run meanwhile.
    unsafe {
        if ty.is_null() || enif_get_resource(term.get_env().as_c_arg(), term.as_c_arg(), ty, &mut raw) == 0 {
            return None;
        }
        Some(&*slot(raw))
    }
}

/// Raises `error:badarg`.
fn badarg(env: Env<'_>) -> Term<'_> {
    // SAFETY: makes the exception term of this call's env; the NIF
    // returns it at once.
    unsafe { Term::new(env, enif_make_badarg(env.as_c_arg())) }
}

fn boolean(env: Env<'_>, b: bool) -> Term<'_> {
    if b { true_() } else { false_() }.to_term(env)
}

/// The cells of a list, read with the VM's `enif_get_list_cell` on raw
/// terms: no term is copied or stored, so that counting them, on the
/// disabled path, costs two loads per cell.
struct Cells<'a> {
    env: Env<'a>,
    rest: ErlNifTerm,
}

impl<'a> Iterator for Cells<'a> {
    type Item = Term<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<Term<'a>> {
        let (mut head, mut tail) = (ErlNifTerm::default(), ErlNifTerm::default());
        // SAFETY: `rest` is a term of the call's env (the argument, or a
        // tail read from it); the VM only reads it and writes head and
        // tail, terms of the same env.
        unsafe {
            if rustler::sys::enif_get_list_cell(self.env.as_c_arg(), self.rest, &mut head, &mut tail) == 0 {
                return None;
            }
            self.rest = tail;
            Some(Term::new(self.env, head))
        }
    }
}

fn cells(list: Term<'_>) -> Cells<'_> {
    Cells { env: list.get_env(), rest: list.as_c_arg() }
}

/// Is `list` a proper list of exactly `n` elements? Reads at most
/// `n + 1` cells.
#[inline(always)]
fn has_length(list: Term<'_>, n: usize) -> bool {
    let mut c = cells(list);
    for _ in 0..n {
        if c.next().is_none() {
            return false;
        }
    }
    crate::args::is_nil_raw(c.env, c.rest)
}

/// What a fire or is-enabled call finds: `Err(())` for `badarg`,
/// `Ok(None)` for a deleted provider, else the probe.
type Found<'a> = Result<Option<&'a Probe>, ()>;

/// The probe of a provider handle and a probe name.
#[inline(always)]
fn provider_probe_of<'a>(handle: Term<'a>, name: Term<'a>) -> Found<'a> {
    let h = handle_of(handle).filter(|h| h.probe.is_none()).ok_or(())?;
    if h.shared.provider.is_deleted() {
        return Ok(None);
    }
    h.shared.probe(name).map(Some).ok_or(())
}

/// The probe of a probe handle.
#[inline(always)]
fn probe_handle_of(handle: Term<'_>) -> Found<'_> {
    let h = handle_of(handle).ok_or(())?;
    let i = h.probe.ok_or(())?;
    if h.shared.provider.is_deleted() {
        return Ok(None);
    }
    h.shared.provider.probes().get(i).map(Some).ok_or(())
}

/// Fires `probe` with the terms of `args` if it is enabled: `true` when
/// fired, `false` when no tracer listens (nothing converted), `badarg`
/// when `args` is not a list of as many elements as it has arguments
/// (checked first, enabled or not).
#[inline(always)]
fn fire<'a>(env: Env<'a>, found: Found<'_>, args: Term<'a>) -> Term<'a> {
    let probe = match found {
        Ok(Some(probe)) => probe,
        Ok(None) => return false_().to_term(env),
        Err(()) => return badarg(env),
    };
    if !has_length(args, probe.types().len()) {
        return badarg(env);
    }
    if !probe.enabled() {
        return false_().to_term(env);
    }
    convert_and_fire(probe, args);
    true_().to_term(env)
}

/// Converts the terms of `args` (a list of as many as `probe` has
/// arguments) into stack buffers and fires `probe` with them. A
/// function of its own: its 12 KB of string buffers are not part of
/// the disabled path's stack frame.
#[inline(never)]
fn convert_and_fire(probe: &Probe, args: Term<'_>) {
    let mut bufs: [StrBuf; MAX_ARGS] = std::array::from_fn(|_| StrBuf::new());
    let mut registers = Registers::new();
    for (k, ((term, ty), buf)) in cells(args).zip(probe.types()).zip(bufs.iter_mut()).enumerate() {
        match ty {
            Type::String => registers.set_str(k, buf.iolist_or_null(term)),
            _ => registers.set_int(k, int64_or_zero(term)),
        }
    }
    probe.fire(&registers);
}

/// `provider_fire(Handle, ProbeName, Args) -> boolean()`; raises
/// `badarg` for a term that is not a provider handle, a name that is not
/// one of its probes, or a wrong number of arguments. `false` on a
/// deleted provider.
fn provider_fire(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| match FireArgs::from_slice(args) {
        Some(a) => fire(env, provider_probe_of(a.handle, a.probe_name), a.args),
        None => badarg(env),
    })
}

/// `provider_fire(ProbeHandle, Args) -> boolean()`: the same through a
/// probe handle.
fn probe_fire(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| match ProbeFireArgs::from_slice(args) {
        Some(a) => fire(env, probe_handle_of(a.probe), a.args),
        None => badarg(env),
    })
}

fn is_enabled<'a>(env: Env<'a>, found: Found<'_>) -> Term<'a> {
    match found {
        Ok(probe) => boolean(env, probe.is_some_and(Probe::enabled)),
        Err(()) => badarg(env),
    }
}

/// `provider_is_enabled(Handle, ProbeName) -> boolean()`: badarg as
/// for `provider_fire/3`.
fn provider_is_enabled(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| match IsEnabledArgs::from_slice(args) {
        Some(a) => is_enabled(env, provider_probe_of(a.handle, a.probe_name)),
        None => badarg(env),
    })
}

/// As [`is_enabled`], and `badarg` unless the probe takes `arg_count`
/// arguments (checked first, enabled or not, as `fire` checks its
/// list); `false` on a deleted provider.
fn is_enabled_checked<'a>(env: Env<'a>, found: Found<'_>, arg_count: Term<'a>) -> Term<'a> {
    match (found, arg_count.decode::<usize>()) {
        (Ok(None), Ok(_)) => false_().to_term(env),
        (Ok(Some(probe)), Ok(n)) if n == probe.types().len() => boolean(env, probe.enabled()),
        _ => badarg(env),
    }
}

/// `provider_is_enabled(Handle, ProbeName, ArgCount) -> boolean()`:
/// badarg as for `provider_fire/3` with a list of `ArgCount` terms.
fn provider_is_enabled_checked(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| match CheckedArgs::from_slice(args) {
        Some(a) => is_enabled_checked(env, provider_probe_of(a.handle, a.probe_name), a.arg_count),
        None => badarg(env),
    })
}

/// `provider_probe_is_enabled(ProbeHandle, ArgCount) -> boolean()`.
fn probe_is_enabled_checked(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| match ProbeCheckedArgs::from_slice(args) {
        Some(a) => is_enabled_checked(env, probe_handle_of(a.probe), a.arg_count),
        None => badarg(env),
    })
}

/// `provider_is_enabled(ProbeHandle) -> boolean()`.
fn probe_is_enabled(call: NifCall) -> ErlNifTerm {
    call.run(|env, args| match ProbeArgs::from_slice(args) {
        Some(a) => is_enabled(env, probe_handle_of(a.probe)),
        None => badarg(env),
    })
}

/// `provider_probe(Handle, ProbeName) -> ProbeHandle`: badarg as for
/// `provider_fire/3`. Also on a deleted provider (its fires return
/// `false`).
#[rustler::nif]
fn provider_probe<'a>(env: Env<'a>, handle: Term<'a>, probe_name: Term<'a>) -> Term<'a> {
    let Some(h) = handle_of(handle).filter(|h| h.probe.is_none()) else { return badarg(env) };
    let raw = probe_name.as_c_arg();
    match h.shared.by_atom.iter().find(|&&(atom, _)| atom == raw) {
        Some(&(_, i)) => make_handle(env, Handle { shared: h.shared.clone(), probe: Some(i) }),
        None => badarg(env),
    }
}

/// `provider_path(Handle | ProbeHandle) -> binary()`: the object's path.
#[rustler::nif]
fn provider_path<'a>(env: Env<'a>, handle: Term<'a>) -> Term<'a> {
    let Some(h) = handle_of(handle) else { return badarg(env) };
    use std::os::unix::ffi::OsStrExt;
    let path = h.shared.provider.path().as_os_str().as_bytes();
    let mut bin = NewBinary::new(env, path.len());
    bin.as_mut_slice().copy_from_slice(path);
    bin.into()
}

/// `provider_delete(Handle | ProbeHandle) -> ok`.
#[rustler::nif]
fn provider_delete<'a>(env: Env<'a>, handle: Term<'a>) -> Term<'a> {
    match handle_of(handle) {
        Some(h) => {
            h.shared.provider.delete();
            ok().to_term(env)
        }
        None => badarg(env),
    }
}

/// `provider_new(Provider, Probes) -> {ok, Handle} | {error, Reason}`:
/// see `dtrace_provider:new/2` for the reasons, checked in order:
/// provider name, the list, each probe (shape, name, types, count,
/// duplicate), the number of probes, then the node's providers.
#[rustler::nif(schedule = "DirtyIo")]
fn provider_new<'a>(env: Env<'a>, provider: Term<'a>, probes: Term<'a>) -> Term<'a> {
    match define(env, provider, probes) {
        Ok(handle) => (ok(), handle).encode(env),
        Err(reason) => (rustler::types::atom::error(), reason).encode(env),
    }
}

fn define<'a>(env: Env<'a>, provider: Term<'a>, probes: Term<'a>) -> Result<Term<'a>, Term<'a>> {
    let name = name_of(provider)
        .filter(|n| super::name_ok(n))
        .ok_or_else(|| (invalid_provider_name(), provider).encode(env))?;
    let (defs, atoms) = probe_defs(env, probes)?;
    let created = Provider::new(&name, &defs).map_err(|e| match e {
        // Checked above, in the same order: kept as a backstop.
        NewError::Invalid(_) => (invalid_probes(), probes).encode(env),
        NewError::AlreadyDefined => (already_defined(), provider).encode(env),
        NewError::TooManyProviders => (too_many_providers(), MAX_PROVIDERS).encode(env),
        NewError::Io(e) => (file_error(), posix(env, &e)).encode(env),
        NewError::Dlopen(path, _) => (dlopen_failed(), path.to_string_lossy().into_owned()).encode(env),
        NewError::Unsupported => unavailable().encode(env),
    })?;
    let mut by_atom: Vec<(ErlNifTerm, usize)> = atoms
        .iter()
        .zip(&defs)
        .filter_map(|(&atom, d)| {
            let i = created.probes().iter().position(|p| p.name() == d.name)?;
            Some((atom, i))
        })
        .collect();
    by_atom.sort_unstable();
    let shared = Arc::new(Shared { provider: created, by_atom: by_atom.into_boxed_slice() });
    Ok(make_handle(env, Handle { shared, probe: None }))
}

/// A provider name: an atom's text, or a string (iolist, binary) of at
/// most MAX_NAME_BYTES bytes.
fn name_of(term: Term<'_>) -> Option<String> {
    if term.is_atom() {
        return term.atom_to_string().ok();
    }
    let mut bytes = Bytes::new();
    if !read_iolist(term, &mut bytes) || bytes.len() > MAX_NAME_BYTES {
        return None;
    }
    String::from_utf8(bytes.to_vec()).ok()
}

/// The probe list: each `{Name, Types}` checked in order, with its
/// name's atom. Reads at most MAX_PROBES + 1 elements.
#[allow(clippy::type_complexity)]
fn probe_defs<'a>(env: Env<'a>, probes: Term<'a>) -> Result<(Vec<ProbeDef>, Vec<ErlNifTerm>), Term<'a>> {
    let (mut defs, mut atoms) = (Vec::new(), Vec::new());
    let mut rest = probes;
    while !rest.is_empty_list() {
        let Ok((entry, tail)) = rest.list_get_cell() else {
            return Err((invalid_probes(), probes).encode(env));
        };
        if defs.len() == MAX_PROBES {
            return Err((too_many_probes(), MAX_PROBES).encode(env));
        }
        let (def, atom) = probe_def(env, entry, &defs)?;
        defs.push(def);
        atoms.push(atom);
        rest = tail;
    }
    if defs.is_empty() {
        return Err(no_probes().encode(env));
    }
    Ok((defs, atoms))
}

/// One `{Name, Types}` entry, checked against the earlier ones.
fn probe_def<'a>(env: Env<'a>, entry: Term<'a>, earlier: &[ProbeDef]) -> Result<(ProbeDef, ErlNifTerm), Term<'a>> {
    let bad_entry = || (invalid_probe(), entry).encode(env);
    let (name, types) = match rustler::types::tuple::get_tuple(entry).as_deref() {
        Ok([name, types]) => (*name, *types),
        _ => return Err(bad_entry()),
    };
    let text = Some(name)
        .filter(|n| n.is_atom())
        .and_then(|n| n.atom_to_string().ok())
        .filter(|n| super::name_ok(n))
        .ok_or_else(|| (invalid_probe_name(), name).encode(env))?;
    let mut def = ProbeDef { name: text, types: Vec::new() };
    let mut rest = types;
    while !rest.is_empty_list() {
        let (ty, tail) = rest.list_get_cell().map_err(|_| bad_entry())?;
        if def.types.len() == MAX_ARGS {
            return Err((too_many_args(), name, MAX_ARGS).encode(env));
        }
        def.types.push(if ty == int().to_term(env) {
            Type::I64
        } else if ty == string().to_term(env) {
            Type::String
        } else {
            return Err((invalid_arg_type(), name, ty).encode(env));
        });
        rest = tail;
    }
    match super::check_probe(earlier, &def) {
        Ok(()) => Ok((def, name.as_c_arg())),
        Err(Invalid::DuplicateProbe(_)) => Err((duplicate_probe(), name).encode(env)),
        Err(Invalid::TooManyArgs(_)) => Err((too_many_args(), name, MAX_ARGS).encode(env)),
        Err(_) => Err((invalid_probe_name(), name).encode(env)),
    }
}

/// The POSIX name of an I/O error (`enospc`), as `file` gives it;
/// `unknown` without an errno.
fn posix<'a>(env: Env<'a>, e: &std::io::Error) -> Term<'a> {
    let mut name = None;
    if let Some(code) = e.raw_os_error() {
        crate::errno::for_each(|n, number| {
            if number == code && name.is_none() {
                name = Atom::from_str(env, n).ok();
            }
        });
    }
    name.unwrap_or_else(|| Atom::from_str(env, "unknown").unwrap_or(unavailable())).to_term(env)
}
