//! A loaded provider: its object written, opened with `dlopen` and
//! registered as DOF where DTrace's helper device is; its probes' semaphores,
//! sites and is-enabled sites; the node's registry of names in use.

use std::ffi::{CStr, CString, c_void};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use arrayvec::ArrayVec;
use dtrace_catalogue::{Arch, MAX_ARGS, Type};

use super::dir::private_dir;
use super::model::{MAX_PROVIDERS, NewError, ProbeDef, validate};
use super::site::{call_is_enabled, call_site};
use crate::probes::Str;
use crate::sdt_object::{self, ProbeSpec};

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
    /// The site: its instruction (`Arch::site`) and `ret`, in the object's text.
    site: NonNull<c_void>,
    /// The semaphore, in the object's `.probes` (file-backed, writable).
    semaphore: NonNull<AtomicU16>,
    /// The is-enabled site (a 1-byte `nop`; `ret`), once the provider's DOF is
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
