//! The helper device's requests, made on the process's main thread (Linux).
//!
//! Linux's `dtprobed` serves `/dev/dtrace/helper` through CUSE, and FUSE
//! gives it the id of the *thread* that made the request. It files the DOF
//! under that id, and DTrace then names the provider `erlang<TID>` and
//! fires its probes only in the process whose id that is. Only the main
//! thread's id is also the process's, and `drti.o` (what `dtrace -G`
//! objects register with) runs there, in a constructor at program start.
//! A NIF loads on a scheduler thread, so the library asks the main thread
//! to make the request: it installs a handler for a real-time signal that
//! nobody else handles, sends that signal to the main thread only
//! (`tgkill`), and waits (at most [`DEADLINE`]) for the handler to have
//! made the request.
//!
//! ERTS's main thread exists for this kind of work: on Linux it only waits
//! for signals (`erts_sys_main_thread`: `select` with no descriptors, in a
//! loop that expects `EINTR`). The handler does only async-signal-safe
//! system calls (`open`, `ioctl`, `close`), keeps `errno` as it found it,
//! and the disposition is put back once it ran. Nothing is done when the
//! main thread blocks every candidate signal or all of them are in use: the
//! registration fails and says why.

use std::ffi::{CStr, c_int, c_long};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::time::{Duration, Instant};

/// How long the calling thread waits for the main thread's answer.
const DEADLINE: Duration = Duration::from_secs(10);

const DEVICE: &CStr = c"/dev/dtrace/helper";

/// One request at a time.
static LOCK: Mutex<()> = Mutex::new(());
/// The request and its argument, for the handler.
static REQUEST: AtomicU64 = AtomicU64::new(0);
static ARGUMENT: AtomicU64 = AtomicU64::new(0);
/// What the handler's `ioctl` returned, or minus its `errno`.
static RESULT: AtomicI64 = AtomicI64::new(0);
/// Set by the handler once `RESULT` holds its answer.
static DONE: AtomicBool = AtomicBool::new(false);
/// Set when the main thread did not answer in time: its handler may still
/// run, so no other request is made through it.
static STUCK: AtomicBool = AtomicBool::new(false);

/// `errno` of the calling thread.
fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The signal handler: makes the request on the device, on the thread the
/// signal was sent to.
extern "C" fn handler(_signal: c_int) {
    // SAFETY: `__errno_location` returns this thread's `errno`, which the
    // handler saves and restores so that the interrupted code sees its own.
    let errno_at = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno_at };
    // SAFETY: `open`, `ioctl` and `close` are async-signal-safe; the path is
    // a NUL-terminated static; the request's argument is a value or a
    // pointer to a `dof_helper_t` on the stack of the thread waiting in
    // `ioctl` below, which stays there until `DONE` is set.
    let result = unsafe {
        let fd = libc::open(DEVICE.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            -i64::from(*errno_at)
        } else {
            let r = libc::ioctl(fd, REQUEST.load(Acquire) as _, ARGUMENT.load(Acquire) as c_long);
            let r = if r < 0 { -i64::from(*errno_at) } else { i64::from(r) };
            libc::close(fd);
            r
        }
    };
    RESULT.store(result, Relaxed);
    DONE.store(true, Release);
    // SAFETY: as above.
    unsafe { *errno_at = saved };
}

/// A real-time signal nobody handles (default disposition) and the main
/// thread does not block, from the highest down; `None` if there is none.
fn free_signal(pid: libc::pid_t) -> Option<c_int> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{pid}/status")).ok()?;
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())?;
    // glibc keeps the first real-time signals for itself.
    (libc::SIGRTMIN() + 4..=libc::SIGRTMAX()).rev().find(|&signal| {
        let bit = 1u64.checked_shl(signal as u32 - 1).unwrap_or(0);
        // SAFETY: an all-zero `sigaction` is valid to be written into;
        // `sigaction` with a NULL new action only reads the disposition.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let read = unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } == 0;
        blocked & bit == 0 && read && old.sa_sigaction == libc::SIG_DFL
    })
}

/// Makes `ioctl(helper device, request, argument)` on the main thread: what
/// it returned, or why it could not be made. `argument` is a value, or a
/// pointer that stays valid for the whole call.
pub(crate) fn ioctl(request: u64, argument: u64) -> Result<i32, String> {
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if STUCK.load(Relaxed) {
        return Err("the main thread did not answer an earlier request".to_string());
    }
    // SAFETY: `getpid` and `gettid` only return ids.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    if pid == tid {
        // Already the main thread.
        // SAFETY: `open`/`ioctl`/`close` with the caller's argument, valid
        // for the call (this function's contract).
        let r = unsafe {
            let fd = libc::open(DEVICE.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(format!("{}: {}", DEVICE.to_string_lossy(), std::io::Error::last_os_error()));
            }
            let r = libc::ioctl(fd, request as _, argument as c_long);
            let e = errno();
            libc::close(fd);
            if r < 0 { Err(e) } else { Ok(r) }
        };
        return r.map_err(|e| std::io::Error::from_raw_os_error(e).to_string());
    }
    let signal = free_signal(pid).ok_or("no free real-time signal to reach the main thread with")?;
    REQUEST.store(request, Release);
    ARGUMENT.store(argument, Release);
    DONE.store(false, Release);
    // SAFETY: an all-zero `sigaction` is a valid start; the handler is an
    // `extern "C" fn(c_int)`, as `sa_sigaction` without `SA_SIGINFO` wants;
    // `SA_RESTART` restarts the system call it interrupts.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as extern "C" fn(c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `sigemptyset` initialises the mask it is given.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is initialised; the old disposition is not needed
    // (it was the default, `free_signal` checked).
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
        return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: sends `signal` to thread `pid` of process `pid`: the main
    // thread, which now has the handler.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, pid, pid, signal) } == 0;
    let send_error = std::io::Error::last_os_error();
    let deadline = Instant::now() + DEADLINE;
    while sent && !DONE.load(Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    if sent && !DONE.load(Acquire) {
        // The handler may still run: it stays, and no more requests.
        STUCK.store(true, Relaxed);
        return Err(format!("the main thread did not answer in {} s", DEADLINE.as_secs()));
    }
    // SAFETY: an all-zero `sigaction` is a valid start; back to the default
    // disposition, with no signal pending: the one sent was handled, or none
    // was sent.
    let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
    default.sa_sigaction = libc::SIG_DFL;
    // SAFETY: `default` is initialised.
    unsafe { libc::sigaction(signal, &default, std::ptr::null_mut()) };
    if !sent {
        return Err(format!("tgkill: {send_error}"));
    }
    match RESULT.load(Relaxed) {
        r if r < 0 => Err(format!("{}: {}", DEVICE.to_string_lossy(), std::io::Error::from_raw_os_error(-r as c_int))),
        r => Ok(r as i32),
    }
}
