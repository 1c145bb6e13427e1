//! Argument conversion: Erlang terms into the C values a probe site passes.
//!
//! The rules are OTP's (`lib/runtime_tools/c_src/dyntrace.c`,
//! `get_string_maybe/5` and `enif_get_int64`):
//! - a string argument is an iolist or binary of at most 1024 bytes, copied
//!   and NUL-terminated; anything else (an atom such as `undef`, a longer
//!   iolist, a term that is not an iolist) is passed as NULL, never truncated;
//! - an integer argument is any integer that fits a signed 64-bit word;
//!   anything else (a bignum, an atom, a string) is passed as 0;
//! - the pid is the calling process, formatted like `pid_to_list/1`.
//!
//! One deliberate difference, for bounded work: OTP flattens the whole
//! iolist (`enif_inspect_iolist_as_binary`) before it checks the size, so a
//! 1 MB iolist costs a 1 MB copy. Here the walk stops as soon as the string
//! is known to be over 1024 bytes, after [`MAX_VISITS`] terms (cons cells,
//! binaries, empty lists), or below [`MAX_DEPTH`] nested lists, using a
//! fixed stack of pending tails instead of recursion. Such an argument is
//! passed as NULL, as an over-long one is. No heap memory is used.

use std::ffi::c_char;
use std::ptr;

use arrayvec::ArrayVec;
use rustler::{Binary, Env, Term};

/// The longest string argument passed, in bytes (OTP's `MESSAGE_BUFSIZ`).
pub const MAX_STRING_BYTES: usize = 1024;

/// The most terms (cons cells, binaries, empty lists) one string argument
/// may take to read. A flat list of 1024 bytes takes 1025.
pub const MAX_VISITS: usize = 4 * MAX_STRING_BYTES;

/// The deepest nesting of lists inside one string argument.
pub const MAX_DEPTH: usize = 256;

/// A stack buffer for one string argument: up to 1024 bytes and its NUL.
#[derive(Default)]
pub struct StrBuf {
    bytes: ArrayVec<u8, { MAX_STRING_BYTES + 1 }>,
}

impl StrBuf {
    /// An empty buffer. Its storage is not initialised (no 1 KB memset).
    #[inline(always)]
    pub fn new() -> Self {
        Self::default()
    }

    /// Copies `term` into the buffer if it is an iolist (or binary) of at
    /// most 1024 bytes, and returns a pointer to the NUL-terminated copy;
    /// otherwise returns NULL. The pointer is valid while `self` is.
    pub fn iolist_or_null(&mut self, term: Term<'_>) -> *const c_char {
        self.bytes.clear();
        match self.fill(term) {
            Some(()) if self.bytes.len() <= MAX_STRING_BYTES => {
                self.bytes.push(0);
                self.bytes.as_ptr().cast()
            }
            _ => ptr::null(),
        }
    }

    /// The bytes copied by the last successful [`Self::iolist_or_null`],
    /// without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.strip_suffix(&[0]).unwrap_or(&self.bytes)
    }

    /// Appends the bytes of the iolist `term`; `None` when it is not an
    /// iolist or is over the limits. The buffer holds one byte more than
    /// the limit, so a string of 1025 bytes fills it and is then refused.
    fn fill(&mut self, term: Term<'_>) -> Option<()> {
        let mut pending: ArrayVec<Term<'_>, MAX_DEPTH> = ArrayVec::new();
        let mut current = term;
        for _ in 0..MAX_VISITS {
            if let Ok((head, tail)) = current.list_get_cell() {
                if let Ok(n) = head.decode::<u32>() {
                    self.bytes.try_push(u8::try_from(n).ok()?).ok()?;
                    current = tail;
                } else {
                    // A nested iolist (binary or list): read it, then the tail.
                    if !tail.is_empty_list() {
                        pending.try_push(tail).ok()?;
                    }
                    current = head;
                }
                continue;
            }
            if let Ok(binary) = Binary::from_term(current) {
                self.bytes.try_extend_from_slice(binary.as_slice()).ok()?;
            } else if !current.is_empty_list() {
                return None;
            }
            match pending.pop() {
                Some(tail) => current = tail,
                None => return Some(()),
            }
        }
        None
    }
}

/// A signed 64-bit integer argument: the value when `term` is an integer
/// that fits, otherwise 0.
#[inline]
pub fn int64_or_zero(term: Term<'_>) -> i64 {
    term.decode::<i64>().unwrap_or(0)
}

/// Longest `pid_to_list/1` text of a local pid (`<0.N.S>`, 32-bit N and S)
/// plus its NUL, rounded up.
const PID_BYTES: usize = 40;

/// A stack buffer for the calling process's pid text.
pub struct PidBuf {
    bytes: [u8; PID_BYTES],
}

impl Default for PidBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl PidBuf {
    /// An empty buffer.
    #[inline(always)]
    pub fn new() -> Self {
        Self { bytes: [0; PID_BYTES] }
    }

    /// Formats the calling process of `env` like `pid_to_list/1`
    /// (`<0.84.0>`) and returns a pointer to the NUL-terminated text, valid
    /// while `self` is. Returns NULL if the VM cannot format it.
    pub fn self_pid(&mut self, env: Env<'_>) -> *const c_char {
        let pid = env.pid();
        // SAFETY: `enif_make_pid` only reads the pid we were just given by
        // `enif_self` for this env. `enif_snprintf` writes at most
        // `PID_BYTES` bytes, NUL included, into our buffer of that size, and
        // `%T` consumes exactly one term argument, which we pass.
        let written = unsafe {
            let term = rustler::sys::enif_make_pid(env.as_c_arg(), *pid.as_c_arg());
            rustler::sys::get_enif_snprintf()(
                self.bytes.as_mut_ptr().cast(),
                PID_BYTES,
                c"%T".as_ptr(),
                term,
            )
        };
        if written > 0 && (written as usize) < PID_BYTES {
            self.bytes.as_ptr().cast()
        } else {
            ptr::null()
        }
    }
}
