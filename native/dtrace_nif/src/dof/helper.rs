//! DTrace's helper device: where a process hands DTrace its DOF
//! (`DTRACEHIOC_ADDDOF`, answered with a generation number) and takes it
//! back (`DTRACEHIOC_REMOVE`). The same device path and requests on every
//! DTrace platform, with each one's request numbers and `dof_helper_t`:
//! - Linux (DTrace 2.x, `dtprobed` over CUSE): `_IOW(0xd8, 3, dof_helper_t)`
//!   and `_IOW(0xd8, 2, int)`, the generation passed by value
//!   (dtrace-utils, `include/dtrace/ioctl.h`, `libdtrace/drti.c`);
//! - illumos: `DTRACEHIOC | 3` and `| 2` with `DTRACEHIOC` = `('d' << 24 |
//!   't' << 16 | 'h' << 8)`, the generation by value;
//! - FreeBSD: `_IOWR('z', 3, dof_helper_t)` (its `dof_helper_t` carries the
//!   pid) and `_IOW('z', 2, int)`, the generation by reference.
//!
//! illumos and FreeBSD are type-checked here (`cargo check --target`), not
//! run.

use std::ffi::c_void;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
use std::fs::OpenOptions;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
use std::os::fd::AsRawFd;

/// The helper device, on every DTrace platform.
pub(crate) const DEVICE: &str = "/dev/dtrace/helper";

// `as u64`: the request's type is libc's `ioctl_num_type`, u64 on glibc but
// not on every libc (older clippy calls the cast unnecessary on glibc).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(clippy::unnecessary_cast)]
const ADDDOF: u64 = nix::request_code_write!(0xd8, 3, size_of::<dof::dof_bindings::dof_helper_t>()) as u64;
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(clippy::unnecessary_cast)]
const REMOVE: u64 = nix::request_code_write!(0xd8, 2, size_of::<libc::c_int>()) as u64;

#[cfg(target_os = "illumos")]
const ADDDOF: u64 = 0x6474_6803;
#[cfg(target_os = "illumos")]
const REMOVE: u64 = 0x6474_6802;

#[cfg(target_os = "freebsd")]
const ADDDOF: u64 = nix::request_code_readwrite!(b'z', 3, size_of::<dof::dof_bindings::dof_helper_t>()) as u64;
#[cfg(target_os = "freebsd")]
const REMOVE: u64 = nix::request_code_write!(b'z', 2, size_of::<libc::c_int>()) as u64;

/// Copies `dof` to `image` and registers it for the object named `module`
/// (the name DTrace shows), loaded at `base`: the helper's generation
/// number, or why not.
///
/// # Safety
/// `image` must point to `capacity` writable bytes inside a mapped object
/// (not anonymous memory: Linux's `dtprobed` files DOF under the object
/// holding it) that nothing else reads or writes during the call.
pub(crate) unsafe fn add(image: *mut u8, capacity: usize, dof: &[u8], module: &str, base: u64) -> Result<i32, String> {
    if dof.len() > capacity {
        return Err(format!("DOF of {} bytes, over the {capacity} bytes set aside for it", dof.len()));
    }
    // SAFETY: the caller's contract: `capacity` (>= `dof.len()`) writable
    // bytes at `image`, nobody else using them.
    unsafe { std::ptr::copy_nonoverlapping(dof.as_ptr(), image, dof.len()) };
    let mut helper = dof::dof_bindings::dof_helper_t::default();
    for (dst, &src) in helper.dofhp_mod.iter_mut().zip(module.as_bytes().iter().take(63)) {
        *dst = src as libc::c_char;
    }
    helper.dofhp_addr = base;
    helper.dofhp_dof = image as u64;
    #[cfg(target_os = "freebsd")]
    {
        helper.dofhp_pid = std::process::id() as i32;
    }
    // The request takes a pointer to the `dof_helper_t`, which lives across
    // the call; the device reads it and the DOF it points to (filled above)
    // during the call only.
    request(ADDDOF, &raw const helper as u64).map_err(|e| format!("{DEVICE} refused the DOF: {e}"))
}

/// Takes back the DOF of `generation`; a failure is left alone (the device
/// drops a process's DOF when it exits).
pub(crate) fn remove(generation: i32) {
    #[cfg(not(target_os = "freebsd"))]
    // Linux and illumos take the generation by value.
    let _ = request(REMOVE, generation as u64);
    #[cfg(target_os = "freebsd")]
    // FreeBSD reads an int through the pointer, which lives across the call.
    let _ = request(REMOVE, &raw const generation as u64);
}

/// `ioctl(DEVICE, request, argument)`: on Linux from the main thread
/// (`main_thread`: dtprobed files DOF under the requesting thread's id).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn request(request: u64, argument: u64) -> Result<i32, String> {
    super::main_thread::ioctl(request, argument)
}

/// `ioctl(DEVICE, request, argument)`, from this thread: illumos and
/// FreeBSD file DOF under the process.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn request(request: u64, argument: u64) -> Result<i32, String> {
    let file = OpenOptions::new().read(true).write(true).open(DEVICE).map_err(|e| format!("{DEVICE}: {e}"))?;
    // SAFETY: the caller passes a value or a pointer valid for the call,
    // as the request wants.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), request as _, argument as libc::c_long) };
    if r < 0 { Err(std::io::Error::last_os_error().to_string()) } else { Ok(r) }
}

/// This library's file name and load address, from `dladdr` of one of its
/// functions.
fn dl_info() -> Option<libc::Dl_info> {
    // SAFETY: an all-zero `Dl_info` is valid (null pointers); `dladdr`
    // fills it for an address inside a loaded object, here this function.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` reads nothing through the address it is given and
    // writes only `info`.
    let found = unsafe { libc::dladdr(dl_info as *const c_void, &mut info) };
    (found != 0).then_some(info)
}

/// The module name DTrace shows (`erlang<PID>:MODULE:...`): the library's
/// file name, as `drti.o` gives it.
pub(super) fn module_name() -> String {
    dl_info()
        .filter(|i| !i.dli_fname.is_null())
        // SAFETY: `dladdr` set `dli_fname` to the object's NUL-terminated
        // path, which lives as long as the object.
        .map(|i| unsafe { std::ffi::CStr::from_ptr(i.dli_fname) }.to_string_lossy().into_owned())
        .and_then(|path| path.rsplit('/').next().map(str::to_string))
        .unwrap_or_else(|| "dtrace_nif.so".to_string())
}

/// The library's load address (used by the helper only to relocate DOF
/// relocations, which ours has none of).
pub(super) fn load_base() -> u64 {
    dl_info().map_or(0, |i| i.dli_fbase as u64)
}
