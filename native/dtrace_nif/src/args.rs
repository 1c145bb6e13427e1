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

use std::cell::Cell;
use std::ffi::c_char;
use std::ptr;
use std::sync::OnceLock;

use arrayvec::ArrayVec;
use rustler::sys::ErlNifTerm;
use rustler::{Binary, Env, Term};

use crate::atoms;

/// The longest string argument passed, in bytes (OTP's `MESSAGE_BUFSIZ`).
pub const MAX_STRING_BYTES: usize = 1024;

/// The most terms (cons cells, binaries, empty lists) one string argument
/// may take to read. A flat list of 1024 bytes takes 1025.
pub const MAX_VISITS: usize = 4 * MAX_STRING_BYTES;

/// The deepest nesting of lists inside one string argument.
pub const MAX_DEPTH: usize = 256;

/// Immediate terms an argument is compared with before any call into the
/// VM: the atoms `p/N` passes for absent arguments, and `[]`. Atoms and
/// `[]` are immediates, the same value in every env for the life of the VM,
/// so comparing raw values is exact. A pure shortcut: the general path
/// gives the same result (NULL / 0) for them, after up to three VM calls.
struct Immediates {
    undef: ErlNifTerm,
    undefined: ErlNifTerm,
    nil: ErlNifTerm,
}

static IMMEDIATES: OnceLock<Immediates> = OnceLock::new();

/// Records the immediates; called once when the library is loaded.
pub fn init(env: Env<'_>) {
    let _ = IMMEDIATES.set(Immediates {
        undef: atoms::undef().as_c_arg(),
        undefined: atoms::undefined().as_c_arg(),
        nil: Term::list_new_empty(env).as_c_arg(),
    });
}

/// Is `term` the atom `undef` or `undefined` (an absent argument)?
#[inline(always)]
fn is_absent(term: Term<'_>) -> bool {
    let raw = term.as_c_arg();
    IMMEDIATES.get().is_some_and(|im| raw == im.undef || raw == im.undefined)
}

/// Is `term` the empty list?
#[inline(always)]
fn is_nil(term: Term<'_>) -> bool {
    match IMMEDIATES.get() {
        Some(im) => term.as_c_arg() == im.nil,
        None => term.is_empty_list(),
    }
}

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
        // Fast paths first: absent (`undef`), a binary (Elixir strings), a
        // flat charlist (Erlang strings); the general walk for the rest.
        let complete = if is_absent(term) {
            false
        } else if let Ok(binary) = Binary::from_term(term) {
            self.bytes.try_extend_from_slice(binary.as_slice()).is_ok()
        } else {
            match self.copy_flat_bytes(term) {
                Flat::Copied => true,
                Flat::TooLong => false,
                Flat::Other => self.fill(term).is_some(),
            }
        };
        if complete && self.bytes.len() <= MAX_STRING_BYTES {
            self.bytes.push(0);
            self.bytes.as_ptr().cast()
        } else {
            ptr::null()
        }
    }

    /// The bytes copied by the last successful [`Self::iolist_or_null`],
    /// without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.strip_suffix(&[0]).unwrap_or(&self.bytes)
    }

    /// The common case of a charlist, `"abc"`, in one call into the VM
    /// instead of two per character: `enif_get_string` copies a flat list
    /// of bytes and stops after the buffer's size, so its work is bounded.
    fn copy_flat_bytes(&mut self, term: Term<'_>) -> Flat {
        const CAPACITY: usize = MAX_STRING_BYTES + 1;
        // SAFETY: the buffer is empty and holds CAPACITY bytes;
        // `enif_get_string` writes at most `len` = CAPACITY bytes into it
        // (the characters and a NUL) and reads only `term`, a valid term of
        // its env.
        let written = unsafe {
            rustler::sys::enif_get_string(
                term.get_env().as_c_arg(),
                term.as_c_arg(),
                self.bytes.as_mut_ptr().cast(),
                CAPACITY as u32,
                rustler::sys::ErlNifCharEncoding::ERL_NIF_LATIN1,
            )
        };
        match usize::try_from(written) {
            // `written` counts the NUL: 1..=CAPACITY.
            Ok(n @ 1..=CAPACITY) => {
                // SAFETY: `enif_get_string` initialised the first n - 1 bytes
                // (n - 1 <= MAX_STRING_BYTES < CAPACITY).
                unsafe { self.bytes.set_len(n - 1) };
                Flat::Copied
            }
            // 0: not a flat list of bytes; the general walk decides.
            Ok(_) => Flat::Other,
            // -CAPACITY: a flat list of bytes longer than the limit.
            Err(_) => Flat::TooLong,
        }
    }

    /// Appends the bytes of the iolist `term`; `None` when it is not an
    /// iolist or is over the limits. The buffer holds one byte more than
    /// the limit, so a string of 1025 bytes fills it and is then refused.
    fn fill(&mut self, term: Term<'_>) -> Option<()> {
        let mut pending: ArrayVec<Term<'_>, MAX_DEPTH> = ArrayVec::new();
        let mut current = term;
        for _ in 0..MAX_VISITS {
            if !is_nil(current) {
                if let Ok((head, tail)) = current.list_get_cell() {
                    if let Ok(n) = head.decode::<u32>() {
                        self.bytes.try_push(u8::try_from(n).ok()?).ok()?;
                        current = tail;
                    } else {
                        // A nested iolist (binary or list): read it, then the tail.
                        if !is_nil(tail) {
                            pending.try_push(tail).ok()?;
                        }
                        current = head;
                    }
                    continue;
                }
                let binary = Binary::from_term(current).ok()?;
                self.bytes.try_extend_from_slice(binary.as_slice()).ok()?;
            }
            // `current` is done: go on with the innermost pending tail.
            match pending.pop() {
                Some(tail) => current = tail,
                None => return Some(()),
            }
        }
        None
    }
}

/// What [`StrBuf::copy_flat_bytes`] found.
enum Flat {
    /// A flat list of at most 1024 bytes, now in the buffer.
    Copied,
    /// A flat list of more than 1024 bytes.
    TooLong,
    /// Anything else: a nested iolist, or not an iolist.
    Other,
}

/// A signed 64-bit integer argument: the value when `term` is an integer
/// that fits, otherwise 0.
#[inline]
pub fn int64_or_zero(term: Term<'_>) -> i64 {
    if is_absent(term) {
        return 0;
    }
    term.decode::<i64>().unwrap_or(0)
}

/// Longest `pid_to_list/1` text of a local pid (`<0.N.S>`, 32-bit N and S)
/// plus its NUL, rounded up.
const PID_BYTES: usize = 40;

/// A stack buffer for the calling process's pid text.
#[derive(Clone, Copy)]
pub struct PidBuf {
    bytes: [u8; PID_BYTES],
}

impl Default for PidBuf {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    /// The last pid formatted on this scheduler thread, and its text.
    /// Formatting (`enif_snprintf("%T")`) is the costliest step of an
    /// enabled probe, and a process usually fires many in a row. The key is
    /// the pid term, an immediate whose value names one process, so a hit
    /// is always the right text.
    static LAST_PID: Cell<Option<(ErlNifTerm, PidBuf)>> = const { Cell::new(None) };
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
        // SAFETY: `enif_make_pid` only reads the pid `enif_self` just gave us.
        let term = unsafe { rustler::sys::enif_make_pid(env.as_c_arg(), *pid.as_c_arg()) };
        if let Some((key, text)) = LAST_PID.get() {
            if key == term {
                *self = text;
                return self.bytes.as_ptr().cast();
            }
        }
        // SAFETY: `enif_snprintf` writes at most `PID_BYTES` bytes, NUL
        // included, into our buffer of that size, and `%T` consumes exactly
        // one term argument, which we pass.
        let written = unsafe {
            rustler::sys::get_enif_snprintf()(
                self.bytes.as_mut_ptr().cast(),
                PID_BYTES,
                c"%T".as_ptr(),
                term,
            )
        };
        if written > 0 && (written as usize) < PID_BYTES {
            LAST_PID.set(Some((term, *self)));
            self.bytes.as_ptr().cast()
        } else {
            ptr::null()
        }
    }
}
