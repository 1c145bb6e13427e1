//! The node's private directory of provider objects, and the removal of
//! dead nodes' directories (see the module doc of `provider`, "Files").

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

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
pub(super) fn stale_pid(name: &[u8]) -> Option<u32> {
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
