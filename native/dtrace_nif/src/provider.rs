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

use std::ffi::{CStr, CString, c_void};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use arrayvec::ArrayVec;
use dtrace_catalogue::{Arch, MAX_ARGS, Type, is_c_identifier};

use crate::probes::Str;
use crate::sdt_object::{self, ProbeSpec};

/// The longest provider or probe name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// The most probes one provider may have.
pub const MAX_PROBES: usize = 1024;

/// The most providers loaded in one node at once. A deleted provider stays
/// loaded, and counted, until its last handle is garbage-collected.
pub const MAX_PROVIDERS: usize = 1024;

/// Why a definition was refused, naming the offending probe by its index
/// in the list given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The provider name is not a C identifier of 1..=64 bytes.
    ProviderName,
    /// The provider has no probes.
    NoProbes,
    /// More than [`MAX_PROBES`] probes.
    TooManyProbes,
    /// Probe `i`'s name is not a C identifier of 1..=64 bytes.
    ProbeName(usize),
    /// Probe `i` has more than [`MAX_ARGS`] arguments.
    TooManyArgs(usize),
    /// Probe `i` has the name of an earlier probe.
    DuplicateProbe(usize),
}

/// Why [`Provider::new`] failed.
#[derive(Debug)]
pub enum NewError {
    /// A bad definition.
    Invalid(Invalid),
    /// A provider of this name is defined (and not deleted) in this node.
    AlreadyDefined,
    /// [`MAX_PROVIDERS`] providers are loaded.
    TooManyProviders,
    /// Creating the private directory or writing the object failed.
    Io(io::Error),
    /// `dlopen` refused the object (e.g. the directory is on a `noexec`
    /// file system): its path, and the loader's message.
    Dlopen(PathBuf, String),
    /// No SDT probes on this platform (not Linux on x86_64 or aarch64).
    Unsupported,
}

/// One probe of a definition: its name and argument types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDef {
    /// The note name.
    pub name: String,
    /// The argument types (`int` is [`Type::I64`], `string` [`Type::String`]).
    pub types: Vec<Type>,
}

/// Checks a definition: names, counts, duplicates, in the order given
/// (the first problem is reported).
pub fn validate(provider: &str, probes: &[ProbeDef]) -> Result<(), Invalid> {
    if !name_ok(provider) {
        return Err(Invalid::ProviderName);
    }
    if probes.is_empty() {
        return Err(Invalid::NoProbes);
    }
    for (i, p) in probes.iter().enumerate() {
        if i == MAX_PROBES {
            return Err(Invalid::TooManyProbes);
        }
        check_probe(&probes[..i], p)?;
    }
    Ok(())
}

/// Is `s` a C identifier of at most [`MAX_NAME_BYTES`] bytes?
pub fn name_ok(s: &str) -> bool {
    s.len() <= MAX_NAME_BYTES && is_c_identifier(s)
}

/// Checks probe `p`, which comes after `earlier`: its name, its number of
/// arguments, and that no earlier probe has its name (the index in the
/// error is `earlier.len()`).
pub fn check_probe(earlier: &[ProbeDef], p: &ProbeDef) -> Result<(), Invalid> {
    let i = earlier.len();
    if !name_ok(&p.name) {
        return Err(Invalid::ProbeName(i));
    }
    if p.types.len() > MAX_ARGS {
        return Err(Invalid::TooManyArgs(i));
    }
    if earlier.iter().any(|q| q.name == p.name) {
        return Err(Invalid::DuplicateProbe(i));
    }
    Ok(())
}

/// The providers of this node: names in use and objects loaded.
struct Registry {
    /// Names of the providers defined and not deleted.
    names: std::collections::BTreeSet<String>,
    /// Objects loaded (defined, or deleted and not yet dropped).
    loaded: usize,
    /// Definitions so far: numbers file names and build ids.
    defined: u64,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { names: std::collections::BTreeSet::new(), loaded: 0, defined: 0 });

/// The registry, also after a panic elsewhere (its state is updated in
/// single steps that cannot be left half-done).
fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many providers are loaded in this process.
pub fn loaded() -> usize {
    registry().loaded
}

/// An object opened with `dlopen`, closed when dropped.
struct Library(NonNull<c_void>);

// SAFETY: a dlopen handle may be used and closed from any thread (the
// loader locks internally); `Library` only closes it, once, in `drop`.
unsafe impl Send for Library {}
// SAFETY: as above; `&Library` gives no access to the handle.
unsafe impl Sync for Library {}

impl Library {
    /// Opens `path` (`RTLD_NOW | RTLD_LOCAL`: nothing to resolve, nothing
    /// exported to other objects).
    fn open(path: &CStr) -> Result<Library, String> {
        // SAFETY: `path` is a NUL-terminated string; the object at it has
        // no initialisers, no dependencies and no relocations, so opening
        // runs none of its code.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        NonNull::new(handle).map(Library).ok_or_else(dlerror)
    }

    /// The address of the dynamic symbol `name`.
    fn symbol(&self, name: &str) -> Option<NonNull<c_void>> {
        let name = CString::new(name).ok()?;
        // SAFETY: the handle is open (closed only in drop) and `name` is
        // NUL-terminated; dlsym only looks the name up.
        NonNull::new(unsafe { libc::dlsym(self.0.as_ptr(), name.as_ptr()) })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle is open and closed only here. Nothing uses the
        // object's memory any more: every `Probe` pointing into it belongs
        // to the `Provider` being dropped (see `Provider`'s field order).
        unsafe { libc::dlclose(self.0.as_ptr()) };
    }
}

/// The loader's last error message.
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by the
    // loader, valid until the next dl* call on this thread; it is copied
    // at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "dlopen failed".to_string()
    } else {
        // SAFETY: non-NULL: a NUL-terminated string (above).
        unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
    }
}

/// One probe of a loaded provider.
pub struct Probe {
    name: String,
    types: ArrayVec<Type, MAX_ARGS>,
    /// The site: `nop; ret` in the object's text.
    site: NonNull<c_void>,
    /// The semaphore, in the object's `.probes` (file-backed, writable).
    semaphore: NonNull<AtomicU16>,
    /// The is-enabled site (`nop; ret`), once the provider's DOF is
    /// registered with DTrace; `None` otherwise.
    is_enabled: Option<NonNull<c_void>>,
}

// SAFETY: the pointers point into the object, which stays mapped while the
// `Provider` owning this probe lives; the semaphore is only read (through
// an atomic) and the site only called, both allowed from any thread.
unsafe impl Send for Probe {}
// SAFETY: as above.
unsafe impl Sync for Probe {}

impl Probe {
    /// The probe's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its argument types.
    pub fn types(&self) -> &[Type] {
        &self.types
    }

    /// The semaphore. Raised by each tracer while it listens (the kernel
    /// for a uprobe with a reference counter, gdb by writing memory); an
    /// atomic, so every call re-reads it.
    #[inline(always)]
    pub fn semaphore(&self) -> &AtomicU16 {
        // SAFETY: a u16 in the object's writable segment, 2-byte aligned
        // (the writer places semaphores at even offsets of an 8-aligned
        // section in a page-aligned segment), mapped while `self` lives
        // (see the `unsafe impl Send`).
        unsafe { self.semaphore.as_ref() }
    }

    /// Is a tracer listening: the semaphore, or DTrace through the
    /// is-enabled site when the provider's DOF is registered? One load
    /// without DOF.
    #[inline(always)]
    pub fn enabled(&self) -> bool {
        self.semaphore().load(Relaxed) != 0 || self.is_enabled.is_some_and(call_is_enabled)
    }

    /// Fires the probe: calls its site with `registers` (argument k in the
    /// catalogue's register k). Does not look at the semaphore.
    #[inline]
    pub fn fire(&self, registers: &Registers<'_>) {
        call_site(self.site, &registers.values);
    }
}

/// The argument registers of one firing, with the strings they point to
/// borrowed for `'a`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Registers<'a> {
    values: [u64; MAX_ARGS],
    _strings: std::marker::PhantomData<Str<'a>>,
}

impl<'a> Registers<'a> {
    /// All registers 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Argument `k` (< [`MAX_ARGS`]) is the integer `value`.
    #[inline]
    pub fn set_int(&mut self, k: usize, value: i64) {
        if let Some(r) = self.values.get_mut(k) {
            *r = value as u64;
        }
    }

    /// Argument `k` (< [`MAX_ARGS`]) is the string `value` (a pointer, or NULL).
    #[inline]
    pub fn set_str(&mut self, k: usize, value: Str<'a>) {
        if let Some(r) = self.values.get_mut(k) {
            *r = value.as_ptr() as u64;
        }
    }
}

/// Calls a site with the twelve argument registers set.
#[cfg(all(dtrace_sdt, target_arch = "x86_64"))]
#[inline(never)]
fn call_site(site: NonNull<c_void>, r: &[u64; MAX_ARGS]) {
    // SAFETY: `site` is a site of a loaded object (`Probe`): `nop; ret`,
    // where a tracer may put a breakpoint, which traps and returns with
    // every register as it was. It reads the argument registers, touches
    // no memory and returns; `clobber_abi("C")` says no more than that it
    // is a C function. No `nostack`: `call` pushes the return address, and
    // the compiler keeps the stack aligned and the red zone free for it.
    // The strings the registers point to are borrowed for the call
    // (`Registers<'a>`), and the asm may read memory, so they are written
    // before it runs.
    unsafe {
        core::arch::asm!(
            "call {site}",
            site = in(reg) site.as_ptr(),
            in("rdi") r[0], in("rsi") r[1], in("rdx") r[2], in("rcx") r[3],
            in("r8") r[4], in("r9") r[5], in("r10") r[6], in("r11") r[7],
            in("r12") r[8], in("r13") r[9], in("r14") r[10], in("r15") r[11],
            clobber_abi("C"),
        );
    }
}

/// Calls a site with the twelve argument registers set.
#[cfg(all(dtrace_sdt, target_arch = "aarch64"))]
#[inline(never)]
fn call_site(site: NonNull<c_void>, r: &[u64; MAX_ARGS]) {
    // SAFETY: as on x86_64: the site is `nop; ret` of a loaded object;
    // `blr` sets the link register, which `clobber_abi("C")` declares
    // clobbered with the other caller-saved registers.
    unsafe {
        core::arch::asm!(
            "blr {site}",
            site = in(reg) site.as_ptr(),
            in("x0") r[0], in("x1") r[1], in("x2") r[2], in("x3") r[3],
            in("x4") r[4], in("x5") r[5], in("x6") r[6], in("x7") r[7],
            in("x8") r[8], in("x9") r[9], in("x10") r[10], in("x11") r[11],
            clobber_abi("C"),
        );
    }
}

/// No sites without SDT support (no provider can be defined there).
#[cfg(not(dtrace_sdt))]
fn call_site(_site: NonNull<c_void>, _r: &[u64; MAX_ARGS]) {}

/// Calls an is-enabled site with the address of a 32-bit word in the first
/// argument register; `true` if DTrace wrote 1 there while it trapped.
#[cfg(all(dtrace_sdt, target_arch = "x86_64"))]
#[inline(never)]
fn call_is_enabled(site: NonNull<c_void>) -> bool {
    let mut on: u32 = 0;
    // SAFETY: `site` is an is-enabled site of a loaded object (`Probe`):
    // `nop; ret`, where DTrace may put a breakpoint, which traps, may write
    // 4 bytes at the address in `rdi` (`on`, alive across the call), and
    // returns with every register as it was. `clobber_abi("C")`: a C
    // function; no `nostack` (`call` pushes the return address). The asm
    // may write memory, so `on` is read again after it.
    unsafe {
        core::arch::asm!(
            "call {site}",
            site = in(reg) site.as_ptr(),
            in("rdi") &raw mut on,
            clobber_abi("C"),
        );
    }
    on != 0
}

/// Calls an is-enabled site with the address of a 32-bit word in the first
/// argument register; `true` if DTrace wrote 1 there while it trapped.
#[cfg(all(dtrace_sdt, target_arch = "aarch64"))]
#[inline(never)]
fn call_is_enabled(site: NonNull<c_void>) -> bool {
    let mut on: u32 = 0;
    // SAFETY: as on x86_64, with `x0` and `blr` (the link register is
    // among the registers `clobber_abi("C")` declares clobbered).
    unsafe {
        core::arch::asm!(
            "blr {site}",
            site = in(reg) site.as_ptr(),
            in("x0") &raw mut on,
            clobber_abi("C"),
        );
    }
    on != 0
}

/// No sites without SDT support.
#[cfg(not(dtrace_sdt))]
fn call_is_enabled(_site: NonNull<c_void>) -> bool {
    false
}

/// A loaded provider.
pub struct Provider {
    name: String,
    path: PathBuf,
    /// Sorted by name.
    probes: Box<[Probe]>,
    deleted: AtomicBool,
    /// The helper device's generation number of the provider's DOF while
    /// it is registered with DTrace, or why it is not.
    dof: Mutex<Result<i32, String>>,
    /// Declared last, so dropped (closed) after everything pointing into it.
    _library: Library,
}

impl Provider {
    /// Defines `provider` with `probes`: validates the definition, writes
    /// the object into the private directory and loads it.
    pub fn new(provider: &str, probes: &[ProbeDef]) -> Result<Provider, NewError> {
        validate(provider, probes).map_err(NewError::Invalid)?;
        let arch = architecture().ok_or(NewError::Unsupported)?;
        let number = {
            let mut r = registry();
            if r.names.contains(provider) {
                return Err(NewError::AlreadyDefined);
            }
            if r.loaded >= MAX_PROVIDERS {
                return Err(NewError::TooManyProviders);
            }
            r.names.insert(provider.to_string());
            r.loaded += 1;
            r.defined += 1;
            r.defined
        };
        load(arch, provider, probes, number).inspect_err(|_| {
            let mut r = registry();
            r.names.remove(provider);
            r.loaded -= 1;
        })
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object's path (removed once deleted).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The probes, sorted by name.
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// The probe named `name`.
    pub fn probe(&self, name: &str) -> Option<&Probe> {
        self.probes.binary_search_by(|p| p.name.as_str().cmp(name)).ok().map(|i| &self.probes[i])
    }

    /// `Ok(())` when DTrace finds the provider through DOF (`prov*:::`);
    /// otherwise why not (as [`crate::dof`]'s status: no helper device,
    /// refused, deleted).
    pub fn dof_status(&self) -> Result<(), String> {
        self.dof.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Has [`Provider::delete`] been called?
    #[inline(always)]
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Relaxed)
    }

    /// Deletes the provider: later fires return at once, its file is
    /// removed and its name may be defined again. The object stays mapped
    /// until the provider is dropped. `false` if it was deleted already.
    pub fn delete(&self) -> bool {
        if self.deleted.swap(true, Relaxed) {
            return false;
        }
        let _ = fs::remove_file(&self.path);
        registry().names.remove(&self.name);
        let mut dof = self.dof.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(generation) = *dof {
            // The request waits for the main thread (module `dof`), and a
            // delete may run in a resource destructor on a scheduler: a
            // thread of its own makes it, and nothing waits for it. If no
            // thread can be made, the device drops the DOF when the process
            // exits.
            #[cfg(dtrace_sdt)]
            let _ = std::thread::Builder::new()
                .name("dtrace-dof-remove".into())
                .spawn(move || crate::dof::helper::remove(generation));
            #[cfg(not(dtrace_sdt))]
            let _ = generation;
        }
        *dof = Err("deleted".to_string());
        true
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.delete();
        registry().loaded -= 1;
        // `library` is dropped after this: dlclose.
    }
}

/// The architecture the objects are written for, where probes are SDT.
fn architecture() -> Option<Arch> {
    if cfg!(dtrace_sdt) { Arch::from_target_arch(std::env::consts::ARCH) } else { None }
}

/// Writes and loads definition `number` (validated).
fn load(arch: Arch, provider: &str, probes: &[ProbeDef], number: u64) -> Result<Provider, NewError> {
    let dir = private_dir().map_err(NewError::Io)?;
    let file_name = format!("{provider}.{number}.so");
    let specs: Vec<ProbeSpec<'_>> = probes.iter().map(|p| ProbeSpec { name: &p.name, types: &p.types }).collect();
    let descriptions = dof_descriptions(probes);
    let dof_probes: Vec<crate::dof::DofProbe<'_>> =
        descriptions.iter().map(|(name, note, args)| crate::dof::DofProbe { name, function: note, args }).collect();
    let dof_room = dof_size(provider, &dof_probes);
    let object = sdt_object::write(arch, provider, &file_name, &specs, build_id(provider, probes, number), dof_room)
        .map_err(|e| NewError::Io(io::Error::other(format!("{e:?}"))))?;
    let path = dir.join(&file_name);
    write_new_file(&path, &object.bytes).map_err(NewError::Io)?;
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|e| NewError::Io(io::Error::other(e)))?;
    let library = match Library::open(&c_path) {
        Ok(library) => library,
        Err(message) => {
            let _ = fs::remove_file(&path);
            return Err(NewError::Dlopen(path, message));
        }
    };
    let mut loaded = Vec::with_capacity(probes.len());
    let mut enabled_sites = Vec::with_capacity(probes.len());
    for (def, layout) in probes.iter().zip(&object.probes) {
        let site = library.symbol(&layout.site_symbol);
        let semaphore = library.symbol(&layout.semaphore_symbol);
        let is_enabled = library.symbol(&layout.is_enabled_symbol);
        let (Some(site), Some(semaphore), Some(is_enabled)) = (site, semaphore, is_enabled) else {
            drop(library);
            let _ = fs::remove_file(&path);
            return Err(NewError::Dlopen(path, format!("no symbol {}", layout.site_symbol)));
        };
        let types = def.types.iter().copied().collect();
        loaded.push(Probe { name: def.name.clone(), types, site, semaphore: semaphore.cast(), is_enabled: None });
        enabled_sites.push(is_enabled);
    }
    // The object's load address: a site's address less its link-time one.
    let base = (loaded[0].site.as_ptr() as u64).wrapping_sub(object.probes[0].entry);
    let dof = register_dof(provider, &file_name, &dof_probes, &object, base);
    if dof.is_ok() {
        for (probe, site) in loaded.iter_mut().zip(enabled_sites) {
            probe.is_enabled = Some(site);
        }
    }
    loaded.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Provider {
        name: provider.to_string(),
        path,
        probes: loaded.into_boxed_slice(),
        deleted: AtomicBool::new(false),
        dof: Mutex::new(dof),
        _library: library,
    })
}

/// Each probe's DTrace name, note name and argument types, as its DOF
/// describes it.
fn dof_descriptions(probes: &[ProbeDef]) -> Vec<(String, String, Vec<&'static str>)> {
    probes
        .iter()
        .map(|p| (dtrace_catalogue::dtrace_name(&p.name), p.name.clone(), p.types.iter().map(|t| t.c_name()).collect()))
        .collect()
}

/// The bytes of the provider's DOF (the same whatever the addresses).
fn dof_size(provider: &str, probes: &[crate::dof::DofProbe<'_>]) -> u64 {
    let sites: Vec<crate::dof::Site> = (0..probes.len())
        .flat_map(|index| {
            [crate::dof::Kind::Probe, crate::dof::Kind::IsEnabled].map(|kind| crate::dof::Site {
                index,
                kind,
                address: 0,
            })
        })
        .collect();
    crate::dof::section(provider, probes, &sites).map_or(0, |s| dof::serialize_section(&s).len() as u64)
}

/// Registers the loaded object's probes with DTrace's helper device, its
/// DOF written into the object's `.dtrace_dof`: the generation number, or
/// why not (no device: most Linux machines).
#[cfg(dtrace_sdt)]
fn register_dof(
    provider: &str,
    file_name: &str,
    probes: &[crate::dof::DofProbe<'_>],
    object: &sdt_object::SdtObject,
    base: u64,
) -> Result<i32, String> {
    use crate::dof::{Kind, Site, helper};
    if !Path::new(helper::DEVICE).exists() {
        return Err(format!("no DTrace helper device {}", helper::DEVICE));
    }
    if let Some(why) = crate::dof::lockdown_refuses_is_enabled() {
        return Err(why);
    }
    let sites: Vec<Site> = object
        .probes
        .iter()
        .enumerate()
        .flat_map(|(index, l)| {
            [
                Site { index, kind: Kind::Probe, address: base + l.site },
                Site { index, kind: Kind::IsEnabled, address: base + l.is_enabled },
            ]
        })
        .collect();
    let bytes = dof::serialize_section(&crate::dof::section(provider, probes, &sites)?);
    let (offset, room) = object.dof;
    let image = (base + offset) as *mut u8;
    // SAFETY: `.dtrace_dof` is `room` bytes of the object's writable,
    // file-backed segment, mapped while the provider lives (the caller
    // holds the library); nothing else reads or writes it.
    unsafe { helper::add(image, room as usize, &bytes, file_name, base) }
}

#[cfg(not(dtrace_sdt))]
fn register_dof(
    _provider: &str,
    _file_name: &str,
    _probes: &[crate::dof::DofProbe<'_>],
    _object: &sdt_object::SdtObject,
    _base: u64,
) -> Result<i32, String> {
    Err("no probe sites on this platform".to_string())
}

/// A build id unique to this file: perf keys its cache by build id, and a
/// provider defined again must not take the id of its deleted file.
fn build_id(provider: &str, probes: &[ProbeDef], number: u64) -> [u8; 20] {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut id = [0u8; 20];
    for (k, chunk) in id.chunks_mut(8).enumerate() {
        let mut h = DefaultHasher::new();
        (k, provider, number, std::process::id(), now).hash(&mut h);
        for p in probes {
            (&p.name, p.types.len()).hash(&mut h);
        }
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
    id
}

/// Creates `path` (which must not exist) with mode 0600 and `bytes`.
fn write_new_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes).inspect_err(|_| {
        let _ = fs::remove_file(path);
    })
}

/// The private directory, once created.
static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Serialises the directory's creation.
static DIR_LOCK: Mutex<()> = Mutex::new(());

/// The prefix of private directories' names: `dtrace-<pid>-XXXXXX`.
const DIR_PREFIX: &str = "dtrace-";

/// The node's private directory: created (mode 0700) on first use, after
/// removing the directories of dead nodes; removed at exit.
pub fn private_dir() -> io::Result<&'static Path> {
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    let _creating = DIR_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    // Absolute: tracers are given the path, and the node may change its
    // working directory (file:set_cwd/1) before the files are removed.
    let base = std::path::absolute(std::env::temp_dir())?;
    remove_stale_dirs(&base);
    let dir = make_private_dir(&base)?;
    let dir = DIR.get_or_init(|| dir);
    // SAFETY: registers a function of this library, run at exit or when
    // this library is unloaded (glibc's atexit passes this object's
    // __dso_handle), whichever comes first; it only removes files.
    unsafe { libc::atexit(remove_private_dir_at_exit) };
    Ok(dir)
}

/// Creates `<base>/dtrace-<pid>-XXXXXX` with mode 0700 (mkdtemp).
fn make_private_dir(base: &Path) -> io::Result<PathBuf> {
    let template = base.join(format!("{DIR_PREFIX}{}-XXXXXX", std::process::id()));
    let mut template =
        CString::new(template.into_os_string().into_vec()).map_err(io::Error::other)?.into_bytes_with_nul();
    // SAFETY: `template` is a writable NUL-terminated string ending in
    // XXXXXX, which mkdtemp replaces in place.
    let made = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(io::Error::last_os_error());
    }
    template.pop();
    let dir = PathBuf::from(std::ffi::OsString::from_vec(template));
    // mkdtemp creates it 0700; say so whatever the umask does.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Removes the objects in `dir` (files named `*.so`) and `dir`.
fn remove_objects_and_dir(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            if is_file && entry.file_name().as_bytes().ends_with(b".so") {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// At exit (or when this library is unloaded): removes the objects and the
/// private directory. The objects stay mapped; only the files go.
extern "C" fn remove_private_dir_at_exit() {
    if let Some(dir) = DIR.get() {
        // A panic must not unwind out of an atexit handler.
        let _ = std::panic::catch_unwind(|| remove_objects_and_dir(dir));
    }
}

/// Removes, in `base`, the private directories of processes that are no
/// longer running: named `dtrace-<pid>-*`, owned by this user, mode 0700,
/// real directories (not symbolic links), `pid` not a live process.
pub fn remove_stale_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    // SAFETY: geteuid cannot fail and has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = stale_pid(name.as_bytes()) else { continue };
        let Ok(meta) = fs::symlink_metadata(entry.path()) else { continue };
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o777 != 0o700 {
            continue;
        }
        if pid != std::process::id() && !process_exists(pid) {
            remove_objects_and_dir(&entry.path());
        }
    }
}

/// The pid in a private directory's name, `dtrace-<pid>-XXXXXX`.
fn stale_pid(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(DIR_PREFIX.as_bytes())?;
    let dash = rest.iter().position(|&b| b == b'-')?;
    let (digits, suffix) = rest.split_at(dash);
    if suffix.len() != 7 || !suffix[1..].iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Is there a process with this pid (ours or another user's)?
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists and may be
    // signalled; nothing is sent.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The NIFs behind `dtrace_provider` (internal functions of module
/// `dtrace`). Left out of unit-test builds, which never call into the VM.
///
/// A handle is a NIF resource holding an `Arc` of the provider (and, for a
/// probe handle, the probe's index); the provider is dropped, and its
/// object closed, when the last handle is garbage-collected. The resource
/// type is registered here rather than through rustler's `Resource`,
/// because rustler finds a resource's type through a `TypeId`-keyed hash
/// map on every decode, about as long again as the whole disabled path of
/// `fire`; here the type is one pointer, read once per call.
#[cfg(not(test))]
pub(crate) mod nifs {
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
}

#[cfg(all(test, dtrace_sdt))]
mod tests {
    //! Providers defined, fired and deleted in this process, without a VM:
    //! the loader accepts the objects, sites run, semaphores are the
    //! ones the notes name, and files and mappings go away.

    use super::*;

    fn def(name: &str, types: &[Type]) -> ProbeDef {
        ProbeDef { name: name.to_string(), types: types.to_vec() }
    }

    fn two_probes() -> Vec<ProbeDef> {
        vec![def("request__start", &[Type::I64, Type::String]), def("all", &[Type::I64; MAX_ARGS])]
    }

    /// Lines of /proc/self/maps naming `path` (also once it is removed:
    /// `path (deleted)`).
    fn mappings(path: &Path) -> usize {
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        let path = path.to_str().unwrap();
        maps.lines().filter(|l| l.ends_with(path) || l.ends_with(&format!("{path} (deleted)"))).count()
    }

    #[test]
    fn a_provider_is_a_loaded_file_in_a_private_directory() {
        let p = Provider::new("cargo_test_loaded", &two_probes()).unwrap();
        let path = p.path().to_path_buf();
        let dir = path.parent().unwrap();
        let dir_name = dir.file_name().unwrap().to_str().unwrap();
        assert!(dir_name.starts_with(&format!("dtrace-{}-", std::process::id())), "{dir_name}");
        assert_eq!(fs::metadata(dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert!(path.file_name().unwrap().to_str().unwrap().starts_with("cargo_test_loaded."));
        assert!(mappings(&path) >= 2, "text and data mapped");
        let names: Vec<&str> = p.probes().iter().map(Probe::name).collect();
        assert_eq!(names, ["all", "request__start"]);
        assert_eq!(p.probe("request__start").unwrap().types(), [Type::I64, Type::String]);
        assert!(p.probe("nope").is_none());
        drop(p);
        assert!(!path.exists());
        assert_eq!(mappings(&path), 0, "dlclose unmapped it");
    }

    #[test]
    fn a_raised_semaphore_enables_its_probe_and_the_site_runs() {
        let p = Provider::new("cargo_test_fire", &two_probes()).unwrap();
        let (start, all) = (p.probe("request__start").unwrap(), p.probe("all").unwrap());
        assert!(!start.enabled() && !all.enabled());
        // As a tracer does: raise the semaphore (here from the inside).
        all.semaphore().fetch_add(1, Relaxed);
        assert!(all.enabled() && !start.enabled());
        let s = c"twelve";
        let mut r = Registers::new();
        for k in 0..MAX_ARGS {
            r.set_int(k, -(k as i64));
        }
        r.set_str(1, Str::from_cstr(s));
        r.set_int(MAX_ARGS, 99); // past the registers: ignored
        for _ in 0..1000 {
            all.fire(&r);
            start.fire(&r);
        }
        all.semaphore().fetch_sub(1, Relaxed);
        assert!(!all.enabled());
    }

    #[test]
    fn delete_removes_the_file_and_frees_the_name_but_keeps_the_mapping() {
        let p = Provider::new("cargo_test_delete", &two_probes()).unwrap();
        let path = p.path().to_path_buf();
        assert!(matches!(Provider::new("cargo_test_delete", &two_probes()), Err(NewError::AlreadyDefined)));
        assert!(p.delete());
        assert!(p.is_deleted() && !path.exists());
        assert!(!p.delete(), "once");
        assert!(mappings(&path) >= 2, "still mapped until dropped");
        // The site still runs (a fire that raced the delete).
        p.probe("all").unwrap().fire(&Registers::new());
        let again = Provider::new("cargo_test_delete", &two_probes()).unwrap();
        assert_ne!(again.path(), path);
        drop(p);
        assert!(again.path().exists(), "dropping the old one leaves the new one alone");
        assert!(matches!(Provider::new("cargo_test_delete", &two_probes()), Err(NewError::AlreadyDefined)));
    }

    #[test]
    fn definitions_are_checked_in_order() {
        let bad = |name: &str, probes: &[ProbeDef]| validate(name, probes).unwrap_err();
        let ok = two_probes();
        for name in ["", "1x", "../x", "a/b", "a-b", "a b", "é", &"x".repeat(65)] {
            assert_eq!(bad(name, &ok), Invalid::ProviderName, "{name:?}");
        }
        assert!(validate(&"x".repeat(64), &ok).is_ok());
        assert_eq!(bad("p", &[]), Invalid::NoProbes);
        assert_eq!(bad("p", &[ok[0].clone(), def("a:b", &[])]), Invalid::ProbeName(1));
        assert_eq!(bad("p", &[def(&"y".repeat(65), &[])]), Invalid::ProbeName(0));
        assert_eq!(bad("p", &[ok[0].clone(), def("x", &[Type::I64; 13])]), Invalid::TooManyArgs(1));
        assert_eq!(bad("p", &[def("a", &[]), def("b", &[]), def("a", &[])]), Invalid::DuplicateProbe(2));
        let many: Vec<ProbeDef> = (0..=MAX_PROBES).map(|i| def(&format!("p{i}"), &[])).collect();
        assert_eq!(bad("p", &many), Invalid::TooManyProbes);
        assert!(validate("p", &many[..MAX_PROBES]).is_ok());
        assert!(matches!(Provider::new("a/b", &ok), Err(NewError::Invalid(Invalid::ProviderName))));
    }

    #[test]
    fn the_largest_provider_loads() {
        let many: Vec<ProbeDef> =
            (0..MAX_PROBES).map(|i| def(&format!("probe_{i}"), &[Type::String; MAX_ARGS])).collect();
        let p = Provider::new("cargo_test_largest", &many).unwrap();
        assert_eq!(p.probes().len(), MAX_PROBES);
        let last = p.probe("probe_1023").unwrap();
        last.semaphore().fetch_add(1, Relaxed);
        assert!(last.enabled() && p.probes().iter().filter(|q| q.enabled()).count() == 1);
        last.fire(&Registers::new());
        last.semaphore().fetch_sub(1, Relaxed);
    }

    /// Four threads fire without pause while another deletes the provider
    /// and drops its reference: they stop firing once they see it deleted,
    /// and the object is closed only after the last of them lets go.
    #[test]
    fn concurrent_fires_and_a_delete_do_not_crash() {
        use std::sync::atomic::AtomicU64;
        let p = std::sync::Arc::new(Provider::new("cargo_test_race", &two_probes()).unwrap());
        let path = p.path().to_path_buf();
        p.probe("all").unwrap().semaphore().fetch_add(1, Relaxed);
        let fired = std::sync::Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (p, fired) = (p.clone(), fired.clone());
                std::thread::spawn(move || {
                    let probe = p.probe("all").unwrap();
                    while !p.is_deleted() && probe.enabled() {
                        probe.fire(&Registers::new());
                        fired.fetch_add(1, Relaxed);
                    }
                })
            })
            .collect();
        while fired.load(Relaxed) < 10_000 {
            std::thread::yield_now();
        }
        assert!(p.delete());
        drop(p);
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(mappings(&path), 0);
    }

    #[test]
    fn stale_directories_of_dead_processes_are_removed() {
        let base = std::env::temp_dir().join(format!("dtrace-cargo-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).unwrap();
        // A pid that no longer runs: a child that has exited.
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let mut dead = dead;
        dead.wait().unwrap();
        let make = |name: &str, mode: u32| {
            let dir = base.join(name);
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join("myapp.1.so"), b"x").unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
            dir
        };
        let stale = make(&format!("dtrace-{dead_pid}-aB3xYz"), 0o700);
        let mine = make(&format!("dtrace-{}-aB3xYz", std::process::id()), 0o700);
        let alive = make("dtrace-1-aB3xYz", 0o700); // init
        let not_private = make(&format!("dtrace-{dead_pid}-Qq1234"), 0o755);
        let other_name = make(&format!("dtrace-{dead_pid}-toolong"), 0o700);
        let other_files = make(&format!("dtrace-{dead_pid}-Zz9876"), 0o700);
        fs::write(other_files.join("keep.txt"), b"x").unwrap();
        std::os::unix::fs::symlink(&stale, base.join(format!("dtrace-{dead_pid}-Ln0000"))).unwrap();
        remove_stale_dirs(&base);
        assert!(!stale.exists());
        for kept in [&mine, &alive, &not_private, &other_name] {
            assert!(kept.join("myapp.1.so").exists(), "{kept:?}");
        }
        // Objects go, other files and so the directory stay.
        assert!(!other_files.join("myapp.1.so").exists() && other_files.join("keep.txt").exists());
        fs::remove_dir_all(&base).unwrap();
    }

    /// Defining and dropping, 3000 times: the count of loaded providers
    /// (the limit's) comes back.
    #[test]
    fn churn_leaves_the_count_as_it_was() {
        for _ in 0..3000 {
            let p = Provider::new("cargo_test_churn", &two_probes()).unwrap();
            p.delete();
        }
        assert!(loaded() < 16, "{} loaded: only other tests' providers", loaded());
    }

    #[test]
    fn private_directory_names_give_their_pid() {
        assert_eq!(stale_pid(b"dtrace-1234-aB3xYz"), Some(1234));
        assert_eq!(stale_pid(b"dtrace-1234-aB3xY"), None);
        assert_eq!(stale_pid(b"dtrace-1234-aB3x.z"), None);
        assert_eq!(stale_pid(b"dtrace-x-aB3xYz"), None);
        assert_eq!(stale_pid(b"dtrace_demo.1234"), None);
        assert_eq!(stale_pid(b"other-1234-aB3xYz"), None);
    }
}
