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

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint};

use rustler::sys::ErlNifTerm;
use rustler::{Env, Term};

use crate::probes::Str;

/// The longest text a probe gets, with its NUL (OTP's
/// `DTRACE_TERM_BUF_SIZE`).
pub const TEXT_BYTES: usize = 256;

/// The most terms `%T` visits for one text; it then writes `...`.
pub const MAX_NODES: c_int = 64;

/// A stack buffer for one text argument.
pub struct TextBuf {
    bytes: [u8; TEXT_BYTES],
}

impl Default for TextBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl TextBuf {
    /// An empty buffer.
    #[inline(always)]
    pub fn new() -> Self {
        Self { bytes: [0; TEXT_BYTES] }
    }

    /// The text written, up to and with its NUL; NULL if nothing was.
    fn text(&mut self, written: c_int) -> Str<'_> {
        if written < 0 {
            return Str::NULL;
        }
        // enif_snprintf NUL-terminates within the buffer, cutting what
        // does not fit; make sure of it.
        self.bytes[TEXT_BYTES - 1] = 0;
        let len = self.bytes.iter().position(|&b| b == 0).map_or(TEXT_BYTES, |n| n + 1);
        Str::from_bytes_with_nul(&self.bytes[..len]).unwrap_or(Str::NULL)
    }

    /// Any term as `~p` text (`%T`), at most [`MAX_NODES`] terms of it.
    pub fn term(&mut self, term: Term<'_>) -> Str<'_> {
        // SAFETY: enif_snprintf writes at most TEXT_BYTES bytes, NUL
        // included, into our buffer of that size; `%.*T` consumes an int
        // precision and one term, which we pass, and the term is a valid
        // term of its env for this call.
        let written = unsafe {
            rustler::sys::get_enif_snprintf()(
                self.bytes.as_mut_ptr().cast::<c_char>(),
                TEXT_BYTES,
                c"%.*T".as_ptr(),
                MAX_NODES,
                term.as_c_arg(),
            )
        };
        self.text(written)
    }

    /// `m:f/arity`, as OTP's probes write an mfa.
    pub fn mfa(&mut self, module: Term<'_>, function: Term<'_>, arity: u32) -> Str<'_> {
        // SAFETY: as in `term`; the format consumes two bounded terms and
        // an unsigned int, which we pass.
        let written = unsafe {
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
        self.text(written)
    }

    /// A fixed text.
    pub fn literal(&mut self, text: &str) -> Str<'_> {
        let n = text.len().min(TEXT_BYTES - 1);
        self.bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
        self.bytes[n] = 0;
        Str::from_bytes_with_nul(&self.bytes[..=n]).unwrap_or(Str::NULL)
    }

    /// The name of an atom (latin-1 atoms as is; others as `%T` writes
    /// them).
    pub fn atom(&mut self, env: Env<'_>, atom: Term<'_>) -> Str<'_> {
        // SAFETY: enif_get_atom writes at most TEXT_BYTES bytes, NUL
        // included, into our buffer, and returns 0 if `atom` is not an
        // atom or does not fit.
        let written = unsafe {
            rustler::sys::enif_get_atom(
                env.as_c_arg(),
                atom.as_c_arg(),
                self.bytes.as_mut_ptr().cast::<c_char>(),
                TEXT_BYTES as c_uint,
                rustler::sys::ErlNifCharEncoding::ERL_NIF_LATIN1,
            )
        };
        if written > 0 { self.text(written) } else { self.term(atom) }
    }
}

/// Pid and port texts, with a small per-scheduler cache: a process or port
/// is usually named by many events in a row (a ping-pong names the same
/// two pids on every message), and formatting is the costliest step.
pub struct IdBuf {
    buf: TextBuf,
}

/// Cache entries per scheduler thread.
const CACHED_IDS: usize = 4;

/// The longest id text cached (`<0.N.S>`, `#Port<0.N>`).
const ID_BYTES: usize = 40;

/// Recently formatted ids (term and NUL-terminated text), and the slot
/// written next.
type IdCache = ([(Option<ErlNifTerm>, [u8; ID_BYTES]); CACHED_IDS], usize);

thread_local! {
    /// Recently formatted local pids and ports. Local pids and ports are
    /// immediates, whose value names one process or port; the slot written
    /// next rotates.
    static IDS: Cell<IdCache> = const { Cell::new(([(None, [0; ID_BYTES]); CACHED_IDS], 0)) };
}

impl Default for IdBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl IdBuf {
    /// An empty buffer.
    #[inline(always)]
    pub fn new() -> Self {
        Self { buf: TextBuf::new() }
    }

    /// A local pid or port as `%T` writes it (`<0.84.0>`, `#Port<0.5>`),
    /// from the cache when it holds it. `cacheable` says the term is an
    /// immediate (a local pid or port): anything else is formatted every
    /// time.
    pub fn id(&mut self, term: Term<'_>, cacheable: bool) -> Str<'_> {
        let raw = term.as_c_arg();
        if cacheable {
            let (entries, _) = IDS.get();
            if let Some((_, text)) = entries.iter().find(|(key, _)| *key == Some(raw)) {
                self.buf.bytes[..ID_BYTES].copy_from_slice(text);
                return self.buf.text(0);
            }
        }
        let failed = self.buf.term(term).is_null();
        if cacheable && !failed {
            let len = self.buf.bytes.iter().position(|&b| b == 0).unwrap_or(TEXT_BYTES);
            if len < ID_BYTES {
                let mut text = [0; ID_BYTES];
                text[..len].copy_from_slice(&self.buf.bytes[..len]);
                let (mut entries, next) = IDS.get();
                entries[next] = (Some(raw), text);
                IDS.set((entries, (next + 1) % CACHED_IDS));
            }
        }
        self.buf.text(0)
    }
}
