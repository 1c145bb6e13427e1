//! The size of a message in machine words, as OTP's message probes report
//! it: `erts_debug:flat_size/1` (the words of the term's heap copy), with
//! bounded work.
//!
//! Computed through the NIF API, term by term, with a fixed stack and at
//! most [`MAX_VISITS`] terms visited. The sizes are those of a 64-bit VM,
//! OTP 25 to 27:
//! - immediates (atoms, small integers, `[]`, local pids and ports): 0;
//!   the empty tuple is a shared literal: 0;
//! - a list cell: 2; a tuple: 1 + arity; a float: 2; an integer that needs
//!   a bignum of one 64-bit digit: 2;
//! - a binary of at most 64 bytes (a heap binary): 2 + ceil(bytes / 8); a
//!   larger one (a reference-counted binary): 6 before OTP 27 (a ProcBin),
//!   8 from OTP 27 on (a BinRef and its ErlSubBits: erl_bits.h's
//!   `ERL_REFC_BITS_SIZE`), read from the running VM at load ([`load`]);
//! - a map of 1..32 keys: 4 + 2 × keys (`#{}`: 3), plus its keys and values;
//! - a remote pid: 4; a reference: 3.
//!
//! Where the NIF API cannot tell the size, the answer is `None` (the probe
//! passes -1): funs (their layout changed in OTP 27 too), integers past 64
//! bits, bitstrings that are not whole bytes, maps of more than 32 keys
//! (hash maps, whose shape depends on the VM's hash), and any term that
//! takes more than [`MAX_VISITS`] terms or [`MAX_PENDING`] pending
//! containers to walk.
//! Two kinds are counted at their common size, which can be short: an
//! alias reference (the tag of a `gen_server:call/2`) has 4 words, not 3;
//! a sub-binary of a large binary counts as the binary it refers to.

use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use arrayvec::ArrayVec;
use rustler::sys::{ErlNifEnv, ErlNifTerm};
use rustler::{Binary, Term, TermType};

/// The most terms visited for one size.
pub const MAX_VISITS: usize = 10_000;

/// The most containers (tuples, lists, maps) waiting to be walked.
pub const MAX_PENDING: usize = 512;

/// What is left to walk: one term, or the rest of a tuple.
#[derive(Clone, Copy)]
enum Pending {
    Term(ErlNifTerm),
    Elements { next: *const ErlNifTerm, left: usize },
}

/// Words of a reference-counted binary on this VM: 6 (OTP 25, 26) or 8
/// (OTP 27 and later); set by [`load`].
static REFC_BINARY_WORDS: AtomicU64 = AtomicU64::new(6);

inventory::submit!(crate::load::LoadStep { order: crate::load::order::FLAT_SIZE, run: |_| load() });

/// Library load: the running VM's OTP release decides the size of a
/// reference-counted binary. Always succeeds.
fn load() -> bool {
    let mut info = MaybeUninit::<rustler::sys::ErlNifSysInfo>::zeroed();
    // SAFETY: enif_system_info fills at most `size` bytes of the struct we
    // pass; zeroed first, so a field it does not fill is NULL or 0.
    unsafe { rustler::sys::enif_system_info(info.as_mut_ptr(), std::mem::size_of::<rustler::sys::ErlNifSysInfo>()) };
    // SAFETY: initialised (zeroed, then filled) above.
    let release = unsafe { info.assume_init() }.otp_release;
    let major = if release.is_null() {
        0
    } else {
        // SAFETY: a NUL-terminated string owned by the VM, for its life.
        let text = unsafe { std::ffi::CStr::from_ptr(release) };
        text.to_str().ok().and_then(|t| t.parse::<u32>().ok()).unwrap_or(0)
    };
    REFC_BINARY_WORDS.store(if major >= 27 { 8 } else { 6 }, Relaxed);
    true
}

/// Small integers are 60-bit on a 64-bit VM: -2^59 .. 2^59 - 1.
const MIN_SMALL: i64 = -(1 << 59);
const MAX_SMALL: i64 = (1 << 59) - 1;

/// The flat size of `term` in words, or `None` where it cannot be told
/// exactly enough or over the bounds (see the module doc).
pub fn flat_size(term: Term<'_>) -> Option<u64> {
    walk(term, &mut 0)
}

/// The flat size of `term` in words and the bytes of the binaries in it
/// (a large binary's bytes are not in its flat size: it is shared, not
/// copied, by a local send), in one walk with the same bounds; `None` as
/// for [`flat_size`].
pub fn size_and_binary_bytes(term: Term<'_>) -> Option<(u64, u64)> {
    let mut bytes = 0;
    walk(term, &mut bytes).map(|words| (words, bytes))
}

fn walk(term: Term<'_>, binary_bytes: &mut u64) -> Option<u64> {
    let env = term.get_env();
    let raw_env = env.as_c_arg();
    let mut pending: ArrayVec<Pending, MAX_PENDING> = ArrayVec::new();
    pending.push(Pending::Term(term.as_c_arg()));
    let mut size: u64 = 0;
    let mut visits = 0usize;
    while let Some(p) = pending.pop() {
        let raw = match p {
            Pending::Term(raw) => raw,
            Pending::Elements { next, left } => {
                if left > 1 {
                    // SAFETY: `next` points into a tuple's element array
                    // (from enif_get_tuple) with `left` elements left.
                    pending.push(Pending::Elements { next: unsafe { next.add(1) }, left: left - 1 });
                }
                // SAFETY: as above; left >= 1.
                unsafe { *next }
            }
        };
        visits += 1;
        if visits > MAX_VISITS {
            return None;
        }
        // Immediates (atoms, small integers, local pids and ports, `[]`)
        // take no words: no call into the VM for them.
        if crate::term::immediate_bits(raw).is_some() {
            continue;
        }
        // SAFETY: `raw` is the message or a part of it, a term of `env`.
        let t = unsafe { Term::new(env, raw) };
        size += match t.get_type() {
            TermType::Atom | TermType::Port => 0,
            TermType::Integer => integer_words(t)?,
            TermType::Float => 2,
            TermType::Pid => {
                let mut pid = MaybeUninit::uninit();
                // SAFETY: enif_get_local_pid only reads the term and
                // writes the pid struct we pass.
                let local = unsafe { rustler::sys::enif_get_local_pid(raw_env, raw, pid.as_mut_ptr()) };
                if local != 0 { 0 } else { 4 }
            }
            TermType::Ref => 3,
            TermType::Fun | TermType::Unknown => return None,
            TermType::Binary => {
                let bytes = Binary::from_term(t).ok()?.len() as u64;
                *binary_bytes += bytes;
                if bytes <= 64 { 2 + bytes.div_ceil(8) } else { REFC_BINARY_WORDS.load(Relaxed) }
            }
            TermType::Tuple => {
                let mut arity: c_int = 0;
                let mut elements: *const ErlNifTerm = std::ptr::null();
                // SAFETY: enif_get_tuple only reads the term and writes the
                // arity and a pointer to its elements, valid while the term
                // is (this call).
                if unsafe { rustler::sys::enif_get_tuple(raw_env, raw, &mut arity, &mut elements) } == 0 {
                    return None;
                }
                let arity = usize::try_from(arity).ok()?;
                if arity > 0 {
                    pending.try_push(Pending::Elements { next: elements, left: arity }).ok()?;
                    1 + arity as u64
                } else {
                    0
                }
            }
            TermType::List => list_words(raw_env, raw, &mut pending, &mut visits)?,
            TermType::Map => map_words(raw_env, raw, &mut pending)?,
        };
    }
    Some(size)
}

/// Words of an integer: 0 for a small one, 2 for one 64-bit digit.
fn integer_words(t: Term<'_>) -> Option<u64> {
    match t.decode::<i64>() {
        Ok(i) if (MIN_SMALL..=MAX_SMALL).contains(&i) => Some(0),
        Ok(_) => Some(2),
        Err(_) => t.decode::<u64>().ok().map(|_| 2),
    }
}

/// Walks the cells of a list (2 words each), queueing heads that are not
/// immediates, and an improper tail. One raw `enif_get_list_cell` a cell
/// and no wrapper values: this loop is the whole cost of a long list's
/// size (a 100-element list: about 1.1 us through rustler's
/// `list_get_cell`, its `Result` stored and dropped per cell; `make
/// bench`, bench/profile.md).
fn list_words(
    env: *mut ErlNifEnv,
    list: ErlNifTerm,
    pending: &mut ArrayVec<Pending, MAX_PENDING>,
    visits: &mut usize,
) -> Option<u64> {
    let mut words = 0;
    let mut cell = list;
    let (mut head, mut tail) = (ErlNifTerm::default(), ErlNifTerm::default());
    loop {
        // SAFETY: enif_get_list_cell only reads `cell` (a term of `env`:
        // the message or a part of it) and writes the two terms we pass.
        if unsafe { rustler::sys::enif_get_list_cell(env, cell, &mut head, &mut tail) } == 0 {
            // SAFETY: enif_is_empty_list only reads the term.
            if unsafe { rustler::sys::enif_is_empty_list(env, cell) } != 0 {
                return Some(words);
            }
            pending.try_push(Pending::Term(cell)).ok()?;
            return Some(words);
        }
        words += 2;
        *visits += 1;
        if *visits > MAX_VISITS {
            return None;
        }
        if crate::term::immediate_bits(head).is_none() {
            pending.try_push(Pending::Term(head)).ok()?;
        }
        cell = tail;
    }
}

/// A flatmap: 4 + 2 × keys words (`#{}`: 3), with its keys and values
/// queued. `None` for a map of more than 32 keys (a hash map).
fn map_words(env: *mut ErlNifEnv, map: ErlNifTerm, pending: &mut ArrayVec<Pending, MAX_PENDING>) -> Option<u64> {
    let mut keys: usize = 0;
    // SAFETY: enif_get_map_size only reads the term and writes the size.
    if unsafe { rustler::sys::enif_get_map_size(env, map, &mut keys) } == 0 || keys > 32 {
        return None;
    }
    if keys == 0 {
        return Some(3);
    }
    let mut iter = MaybeUninit::<rustler::sys::ErlNifMapIterator>::uninit();
    // SAFETY: the iterator is created over a valid map of `env` and
    // destroyed below; for a map of at most 32 keys (a flatmap) creating
    // it allocates nothing.
    let created = unsafe {
        rustler::sys::enif_map_iterator_create(
            env,
            map,
            iter.as_mut_ptr(),
            rustler::sys::ErlNifMapIteratorEntry::ERL_NIF_MAP_ITERATOR_HEAD,
        )
    };
    if created == 0 {
        return None;
    }
    let mut ok = true;
    for _ in 0..keys {
        let (mut k, mut v) = (ErlNifTerm::default(), ErlNifTerm::default());
        // SAFETY: the iterator was created above and is not at its end
        // (we stop after `keys` pairs).
        if unsafe { rustler::sys::enif_map_iterator_get_pair(env, iter.as_mut_ptr(), &mut k, &mut v) } == 0
            || pending.try_push(Pending::Term(k)).is_err()
            || pending.try_push(Pending::Term(v)).is_err()
        {
            ok = false;
            break;
        }
        // SAFETY: as above.
        unsafe { rustler::sys::enif_map_iterator_next(env, iter.as_mut_ptr()) };
    }
    // SAFETY: created above, destroyed once.
    unsafe { rustler::sys::enif_map_iterator_destroy(env, iter.as_mut_ptr()) };
    ok.then_some(4 + 2 * keys as u64)
}
