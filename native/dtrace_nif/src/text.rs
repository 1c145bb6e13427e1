//! Terms as the text the VM probes carry, written into stack buffers with
//! the VM's own formatter (`enif_snprintf`, `%T`), as OTP's dynamic-trace
//! build writes them (`erts/emulator/beam/global.h`, `dtrace_fun_decode`):
//! a pid as `<0.84.0>`, a port as `#Port<0.5>`, an mfa as `m:f/arity`
//! (atoms quoted where Erlang would quote them), any other term as `~p`
//! text.
//!
//! Work is bounded: a buffer holds [`TEXT_BYTES`] bytes (OTP's
//! `DTRACE_TERM_BUF_SIZE`), longer text is cut, and `%T` is given a
//! precision of [`MAX_NODES`] terms, after which the VM's formatter stops
//! walking the term and writes `...`, whatever the term's size or depth.
//! Buffers are not cleared first: only the bytes written are read.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint};
use std::mem::MaybeUninit;

use rustler::sys::ErlNifTerm;
use rustler::{Env, Term, TermType};

use crate::probes::Str;

/// The longest text a probe gets, with its NUL (OTP's
/// `DTRACE_TERM_BUF_SIZE`).
pub const TEXT_BYTES: usize = 256;

/// The most terms `%T` visits for one text; it then writes `...`.
pub const MAX_NODES: c_int = 64;

/// A text kept for later: its bytes, NUL included, and their number.
#[derive(Clone, Copy)]
pub struct KeptText {
    bytes: [u8; TEXT_BYTES],
    len: usize,
}

/// A stack buffer for one text argument.
pub struct TextBuf {
    bytes: [MaybeUninit<u8>; TEXT_BYTES],
    /// How many bytes were written, NUL included; 0 when none (NULL).
    len: usize,
}

impl Default for TextBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl TextBuf {
    /// An empty buffer (its bytes are not cleared).
    #[inline(always)]
    pub fn new() -> Self {
        Self { bytes: [MaybeUninit::uninit(); TEXT_BYTES], len: 0 }
    }

    /// The bytes written, NUL included.
    fn written(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written (every writer below
        // sets `len` to what it wrote), `len <= TEXT_BYTES`, and u8 and
        // MaybeUninit<u8> have the same layout.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<u8>(), self.len) }
    }

    /// The text, or NULL if nothing was written.
    fn str(&self) -> Str<'_> {
        Str::from_bytes_with_nul(self.written()).unwrap_or(Str::NULL)
    }

    /// After `enif_snprintf` returned `res`: it wrote `res` characters and
    /// a NUL, or, cut, `TEXT_BYTES - 1` and a NUL (erts_vsnprintf).
    fn after_snprintf(&mut self, res: c_int) -> Str<'_> {
        self.len = match usize::try_from(res) {
            Ok(n) => n.min(TEXT_BYTES - 1) + 1,
            Err(_) => 0,
        };
        self.str()
    }

    /// Copies `text` (without a NUL) and a NUL, cut to fit.
    fn copy(&mut self, text: &[u8]) -> Str<'_> {
        let n = text.len().min(TEXT_BYTES - 1);
        for (dst, &b) in self.bytes.iter_mut().zip(&text[..n]) {
            dst.write(b);
        }
        self.bytes[n].write(0);
        self.len = n + 1;
        self.str()
    }

    /// Any term as `~p` text (`%T`), at most [`MAX_NODES`] terms of it.
    pub fn term(&mut self, term: Term<'_>) -> Str<'_> {
        // SAFETY: enif_snprintf writes at most TEXT_BYTES bytes, NUL
        // included, into our buffer of that size; `%.*T` consumes an int
        // precision and one term, which we pass, and the term is a valid
        // term of its env for this call.
        let res = unsafe {
            rustler::sys::get_enif_snprintf()(
                self.bytes.as_mut_ptr().cast::<c_char>(),
                TEXT_BYTES,
                c"%.*T".as_ptr(),
                MAX_NODES,
                term.as_c_arg(),
            )
        };
        self.after_snprintf(res)
    }

    /// `m:f/arity`, as OTP's probes write an mfa.
    pub fn mfa(&mut self, module: Term<'_>, function: Term<'_>, arity: u32) -> Str<'_> {
        // SAFETY: as in `term`; the format consumes two bounded terms and
        // an unsigned int, which we pass.
        let res = unsafe {
            rustler::sys::get_enif_snprintf()(
                self.bytes.as_mut_ptr().cast::<c_char>(),
                TEXT_BYTES,
                c"%.*T:%.*T/%u".as_ptr(),
                MAX_NODES,
                module.as_c_arg(),
                MAX_NODES,
                function.as_c_arg(),
                arity as c_uint,
            )
        };
        self.after_snprintf(res)
    }

    /// A fixed text.
    pub fn literal(&mut self, text: &str) -> Str<'_> {
        self.copy(text.as_bytes())
    }

    /// The name of an atom (latin-1 atoms as is; others as `%T` writes
    /// them).
    pub fn atom(&mut self, env: Env<'_>, atom: Term<'_>) -> Str<'_> {
        // SAFETY: enif_get_atom writes at most TEXT_BYTES bytes, NUL
        // included, into our buffer, and returns how many (NUL included),
        // or 0 if `atom` is not an atom or does not fit.
        let written = unsafe {
            rustler::sys::enif_get_atom(
                env.as_c_arg(),
                atom.as_c_arg(),
                self.bytes.as_mut_ptr().cast::<c_char>(),
                TEXT_BYTES as c_uint,
                rustler::sys::ErlNifCharEncoding::ERL_NIF_LATIN1,
            )
        };
        match usize::try_from(written) {
            Ok(n @ 1..=TEXT_BYTES) => {
                self.len = n;
                self.str()
            }
            _ => self.term(atom),
        }
    }

    /// The text, kept for later ([`TextBuf::kept`]).
    pub fn keep(&self) -> KeptText {
        let mut kept = KeptText { bytes: [0; TEXT_BYTES], len: self.len };
        kept.bytes[..self.len].copy_from_slice(self.written());
        kept
    }

    /// A text kept with [`TextBuf::keep`].
    pub fn kept(&mut self, kept: &KeptText) -> Str<'_> {
        match kept.len.checked_sub(1) {
            Some(n) => self.copy(&kept.bytes[..n]),
            None => {
                self.len = 0;
                Str::NULL
            }
        }
    }
}

/// Pid and port texts, the one formatter of them (the calling process of
/// a user probe, the pids and ports of the VM probes), with a small
/// per-scheduler cache: a process or port is usually named by many events
/// in a row (a ping-pong names the same two pids on every message), and
/// formatting is the costliest step.
pub struct IdText {
    buf: TextBuf,
}

/// Cache entries per scheduler thread.
const CACHED_IDS: usize = 4;

/// The longest id text cached, NUL included (`<0.N.S>`, `#Port<0.N>`).
const ID_BYTES: usize = 40;

/// Recently formatted ids (term, text with its NUL, its length), and the
/// slot written next.
type IdCache = ([(Option<ErlNifTerm>, [u8; ID_BYTES], usize); CACHED_IDS], usize);

thread_local! {
    /// Recently formatted local pids and ports. Local pids and ports are
    /// immediates, whose value names one process or port for the life of
    /// the node; the slot written next rotates.
    static IDS: Cell<IdCache> = const { Cell::new(([(None, [0; ID_BYTES], 0); CACHED_IDS], 0)) };
}

impl Default for IdText {
    fn default() -> Self {
        Self::new()
    }
}

impl IdText {
    /// An empty buffer.
    #[inline(always)]
    pub fn new() -> Self {
        Self { buf: TextBuf::new() }
    }

    /// A pid or port as `%T` writes it (`<0.84.0>`, `#Port<0.5>`,
    /// `<5.84.0>` for another node's), any other term as `~p` text.
    /// Local pids and ports come from the cache when it holds them.
    pub fn id(&mut self, env: Env<'_>, term: Term<'_>) -> Str<'_> {
        let cacheable = match term.get_type() {
            TermType::Pid => is_local_pid(env, term),
            TermType::Port => is_local_port(env, term),
            _ => false,
        };
        self.format(term.as_c_arg(), cacheable, |buf| buf.term(term))
    }

    /// The calling process of `env`, like `pid_to_list/1` (`<0.84.0>`);
    /// NULL if the VM cannot say (no calling process).
    pub fn self_pid(&mut self, env: Env<'_>) -> Str<'_> {
        let mut pid = MaybeUninit::uninit();
        // SAFETY: enif_self writes the pid of the calling process, if there
        // is one, into our struct, and returns NULL otherwise.
        if unsafe { rustler::sys::enif_self(env.as_c_arg(), pid.as_mut_ptr()) }.is_null() {
            return Str::NULL;
        }
        // SAFETY: enif_self initialised it; enif_make_pid only reads it.
        let raw = unsafe { rustler::sys::enif_make_pid(env.as_c_arg(), *pid.as_ptr()) };
        // SAFETY: a pid term of this env, made just above.
        let term = unsafe { Term::new(env, raw) };
        self.format(raw, true, |buf| buf.term(term))
    }

    /// The text of `raw`: from the cache, or written by `write` (and cached
    /// when `cacheable`, an immediate).
    fn format(&mut self, raw: ErlNifTerm, cacheable: bool, write: impl FnOnce(&mut TextBuf) -> Str<'_>) -> Str<'_> {
        if cacheable {
            let (entries, _) = IDS.get();
            if let Some((_, text, len)) = entries.iter().find(|(key, _, _)| *key == Some(raw)) {
                return self.buf.copy(&text[..len - 1]);
            }
        }
        if write(&mut self.buf).is_null() {
            return Str::NULL;
        }
        let len = self.buf.len;
        if cacheable && len <= ID_BYTES {
            let mut text = [0; ID_BYTES];
            text[..len].copy_from_slice(self.buf.written());
            let (mut entries, next) = IDS.get();
            entries[next] = (Some(raw), text, len);
            IDS.set((entries, (next + 1) % CACHED_IDS));
        }
        self.buf.str()
    }
}

/// Is `t` (a pid) a pid of this node (an immediate)?
pub fn is_local_pid(env: Env<'_>, t: Term<'_>) -> bool {
    let mut pid = MaybeUninit::uninit();
    // SAFETY: enif_get_local_pid reads the term and writes the pid struct.
    unsafe { rustler::sys::enif_get_local_pid(env.as_c_arg(), t.as_c_arg(), pid.as_mut_ptr()) != 0 }
}

/// Is `t` (a port) a port of this node (an immediate)?
fn is_local_port(env: Env<'_>, t: Term<'_>) -> bool {
    let mut port = MaybeUninit::uninit();
    // SAFETY: enif_get_local_port reads the term and writes the port struct.
    unsafe { rustler::sys::enif_get_local_port(env.as_c_arg(), t.as_c_arg(), port.as_mut_ptr()) != 0 }
}
