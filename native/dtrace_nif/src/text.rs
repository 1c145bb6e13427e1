//! Terms as the text the VM probes carry, written into stack buffers with
//! the VM's own formatter (`enif_snprintf`, `%T`), as OTP's dynamic-trace
//! build writes them (`erts/emulator/beam/global.h`, `dtrace_fun_decode`):
//! a pid as `<0.84.0>`, a port as `#Port<0.5>`, an mfa as `m:f/arity`
//! (atoms quoted where Erlang would quote them), any other term as `~p`
//! text.
//!
//! Work is bounded: a buffer holds [`TEXT_BYTES`] bytes (OTP's
//! `DTRACE_TERM_BUF_SIZE`), longer text is cut, and `%T` is given a
//! precision of [`MAX_NODES`], which the VM's formatter spends as it walks
//! the term (1 per term, plus the name's length per atom) and, once spent,
//! stops and writes `...`, whatever the term's size or depth.
//!
//! The common texts do not go through the VM's formatter: immediates
//! (pids and ports of this node, atoms, small integers) are cached per
//! scheduler thread, and tuples of them (`{<0.84.0>,ping}`) and mfas are
//! put together from the cached texts, exactly as `%T` writes them (an
//! LTTng-recorded ping-pong: 900 ns a message with `%T` for every text,
//! 690 ns so; BENCHMARKS.md has the run).
//! Buffers are not cleared first: only the bytes written are read.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint};
use std::mem::MaybeUninit;

use rustler::sys::ErlNifTerm;
use rustler::{Env, Term};

use crate::term::immediate_bits;

use crate::probes::Str;

/// The longest text a probe gets, with its NUL (OTP's
/// `DTRACE_TERM_BUF_SIZE`).
pub const TEXT_BYTES: usize = 256;

/// The precision given to `%T`: the VM's formatter spends 1 per term and
/// the name's length per atom (erts/emulator/beam/erl_printf_term.c,
/// `dcount`), and stops once it is spent (an atom alone is always written
/// whole).
pub const MAX_NODES: c_int = 64;

/// A text kept for later: its bytes, NUL included, and their number.
#[derive(Clone, Copy)]
pub struct KeptText {
    bytes: [u8; TEXT_BYTES],
    len: usize,
}

/// A stack buffer for one text argument the library writes itself (a term
/// as `%T` writes it, an atom, an mfa): up to `TEXT_BYTES` bytes. A
/// string the caller gave is a `StrBuf` (args.rs) instead.
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
        // Written field by field: `Self { bytes: [MaybeUninit::uninit();
        // N], len: 0 }` makes rustc 1.95 clear the whole struct with a
        // memset (it merges the uninitialised bytes with the zero), which
        // was 2.3% of an enabled message__send.
        let mut buf = MaybeUninit::<Self>::uninit();
        // SAFETY: writes the one field that needs a value through a raw
        // pointer into our own uninitialised struct, without reading it.
        unsafe { std::ptr::addr_of_mut!((*buf.as_mut_ptr()).len).write(0) };
        // SAFETY: `len` is initialised, and `bytes` is an array of
        // MaybeUninit, valid uninitialised.
        unsafe { buf.assume_init() }
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

    /// Any term as `%T` writes it (`<0.84.0>`, `#Port<0.5>`, `ping`,
    /// `{<0.84.0>,ping}`, `"abc"`), at most [`MAX_NODES`] terms of it.
    /// Immediates (pids and ports of this node, atoms, small integers,
    /// `[]`) come from a per-scheduler cache, and a tuple of at most
    /// [`FLAT_TUPLE`] immediates is put together from their texts; the
    /// rest goes through the VM's formatter.
    pub fn term(&mut self, term: Term<'_>) -> Str<'_> {
        let raw = term.as_c_arg();
        if let Some(bits) = immediate_bits(raw) {
            return self.immediate(raw, bits);
        }
        if self.flat_tuple(term.get_env().as_c_arg(), raw) {
            return self.str();
        }
        self.printf(raw)
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
        match immediate_bits(raw) {
            Some(bits) => self.immediate(raw, bits),
            None => self.printf(raw),
        }
    }

    /// `raw` through the VM's formatter: `%.*T`, at most [`MAX_NODES`]
    /// terms, cut to [`TEXT_BYTES`].
    fn printf(&mut self, raw: ErlNifTerm) -> Str<'_> {
        // SAFETY: enif_snprintf writes at most TEXT_BYTES bytes, NUL
        // included, into our buffer of that size; `%.*T` consumes an int
        // precision and one term, which we pass, and `raw` is a valid term
        // of the calling NIF's env for this call.
        let res = unsafe {
            rustler::sys::get_enif_snprintf()(
                self.bytes.as_mut_ptr().cast::<c_char>(),
                TEXT_BYTES,
                c"%.*T".as_ptr(),
                MAX_NODES,
                raw,
            )
        };
        self.after_snprintf(res)
    }

    /// An immediate's text (its raw bits `bits`): from the cache, or
    /// written by `%T` and cached.
    fn immediate(&mut self, raw: ErlNifTerm, bits: usize) -> Str<'_> {
        let hit = IMMEDIATES.with_borrow(|c| {
            let slot = c.keys.iter().position(|&k| k == bits)?;
            self.copy(&c.texts[slot][..c.lens[slot]]);
            Some(())
        });
        if hit.is_none() && !self.printf(raw).is_null() && self.len <= CACHED_BYTES {
            let text = self.written();
            let len = text.len() - 1;
            IMMEDIATES.with_borrow_mut(|c| {
                let slot = c.next;
                c.keys[slot] = bits;
                c.texts[slot][..len].copy_from_slice(&text[..len]);
                c.lens[slot] = len;
                c.next = (slot + 1) % CACHED_TEXTS;
            });
        }
        self.str()
    }

    /// `{A, B, ...}` for a tuple of 1 to [`FLAT_TUPLE`] immediates, as `%T`
    /// writes a tuple (braces, commas, no spaces), each element's text from
    /// the cache: `true` once written. `false` (nothing written) for
    /// anything else, or when the text would not fit in the buffer.
    fn flat_tuple(&mut self, env: *mut rustler::sys::ErlNifEnv, raw: ErlNifTerm) -> bool {
        let mut arity: c_int = 0;
        let mut elements: *const ErlNifTerm = std::ptr::null();
        // SAFETY: enif_get_tuple only reads the term and, for a tuple,
        // writes its arity and a pointer to its elements, valid during this
        // call; it returns 0 for any other term.
        if unsafe { rustler::sys::enif_get_tuple(env, raw, &mut arity, &mut elements) } == 0 {
            return false;
        }
        let arity = match usize::try_from(arity) {
            Ok(n @ 1..=FLAT_TUPLE) => n,
            _ => return false,
        };
        // SAFETY: `elements` points to the tuple's `arity` elements.
        let elements = unsafe { std::slice::from_raw_parts(elements, arity) };
        let mut bits = [0usize; FLAT_TUPLE];
        for (b, &e) in bits.iter_mut().zip(elements) {
            match immediate_bits(e) {
                Some(x) => *b = x,
                None => return false,
            }
        }
        let mut out = [0u8; TEXT_BYTES];
        out[0] = b'{';
        let mut at = 1;
        // What `%.*T` would spend of its precision (see MAX_NODES): 1 for
        // the tuple, and for each element 1 + its text's length, at least
        // what the VM counts (1 for a term, plus the name's length for an
        // atom, whose text may add quotes). While the whole is under the
        // precision, `%T` writes the tuple whole and nothing after it; past
        // it, `%T` cuts the text and writes `... `, and so does the VM's
        // formatter, which is left to do it.
        let mut spent = 1;
        for (i, (&e, &b)) in elements.iter().zip(&bits).enumerate() {
            let mut part = TextBuf::new();
            let text = part.immediate(e, b);
            if text.is_null() {
                return false;
            }
            let text = &part.written()[..part.len - 1];
            // The text, a comma or the closing brace, and the NUL must fit.
            spent += 1 + text.len();
            if spent >= MAX_NODES as usize || at + text.len() + 2 > TEXT_BYTES {
                return false;
            }
            out[at..at + text.len()].copy_from_slice(text);
            at += text.len();
            out[at] = if i + 1 == arity { b'}' } else { b',' };
            at += 1;
        }
        self.copy(&out[..at]);
        true
    }
    /// `m:f/arity`, as OTP's probes write an mfa (`%T` for the atoms:
    /// quoted where Erlang quotes them), the atoms' texts from the cache.
    pub fn mfa<'t>(&mut self, module: Term<'t>, function: Term<'t>, arity: u32) -> Str<'_> {
        let mut out = [0u8; TEXT_BYTES];
        let mut at = 0;
        for (term, sep) in [(module, b':'), (function, b'/')] {
            let mut part = TextBuf::new();
            if part.term(term).is_null() {
                return self.copy(b"");
            }
            let text = &part.written()[..part.len - 1];
            let n = text.len().min(TEXT_BYTES - 1 - at);
            out[at..at + n].copy_from_slice(&text[..n]);
            at += n;
            if at < TEXT_BYTES - 1 {
                out[at] = sep;
                at += 1;
            }
        }
        let mut digits = [0u8; 10];
        let mut i = digits.len();
        let mut n = arity;
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let n = (digits.len() - i).min(TEXT_BYTES - 1 - at);
        out[at..at + n].copy_from_slice(&digits[i..i + n]);
        at += n;
        self.copy(&out[..at])
    }

    /// A fixed text.
    pub fn literal(&mut self, text: &str) -> Str<'_> {
        self.copy(text.as_bytes())
    }

    /// `text` (bytes without a NUL), cut to fit.
    pub fn bytes(&mut self, text: &[u8]) -> Str<'_> {
        self.copy(text)
    }

    /// The text written last, without its NUL (empty when none).
    pub fn text(&self) -> &[u8] {
        self.written().split_last().map_or(&[], |(_, t)| t)
    }

    /// The text written last, or NULL when none.
    pub fn get(&self) -> Str<'_> {
        self.str()
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
            _ => self.printf(atom.as_c_arg()),
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

/// Texts of immediates kept per scheduler thread.
const CACHED_TEXTS: usize = 8;

/// The longest text of an immediate that is cached, without its NUL
/// (`<0.N.S>`, `#Port<0.N>`, most atoms and integers).
const CACHED_BYTES: usize = 40;

/// The most elements of a tuple put together from its elements' texts.
pub const FLAT_TUPLE: usize = 8;

/// Recently written texts of immediates.
struct ImmediateTexts {
    /// The raw terms' bits; 0 (never an immediate: its primary tag is a
    /// header's) marks a free slot.
    keys: [usize; CACHED_TEXTS],
    /// Their texts, without NUL, and the texts' lengths.
    texts: [[u8; CACHED_BYTES]; CACHED_TEXTS],
    lens: [usize; CACHED_TEXTS],
    /// The slot written next (they rotate).
    next: usize,
}

thread_local! {
    /// Recently written texts of immediates, per scheduler thread: a
    /// process or port is usually named by many events in a row (a
    /// ping-pong names the same two pids, and carries the same atoms, on
    /// every message), and the VM's formatter is the costliest step of an
    /// event. Borrowed in place: no copy of the table per lookup.
    static IMMEDIATES: RefCell<ImmediateTexts> = const {
        RefCell::new(ImmediateTexts {
            keys: [0; CACHED_TEXTS],
            texts: [[0; CACHED_BYTES]; CACHED_TEXTS],
            lens: [0; CACHED_TEXTS],
            next: 0,
        })
    };
}

/// Is `t` (a pid) a pid of this node (an immediate)?
pub fn is_local_pid(env: Env<'_>, t: Term<'_>) -> bool {
    let mut pid = MaybeUninit::uninit();
    // SAFETY: enif_get_local_pid reads the term and writes the pid struct.
    unsafe { rustler::sys::enif_get_local_pid(env.as_c_arg(), t.as_c_arg(), pid.as_mut_ptr()) != 0 }
}
