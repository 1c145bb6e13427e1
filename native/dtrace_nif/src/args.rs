//! Argument conversion: Erlang terms into the C values a probe site passes.
//!
//! The rules are OTP's (`lib/runtime_tools/c_src/dyntrace.c`,
//! `get_string_maybe/5` and `enif_get_int64`):
//! - a string argument is an iolist or binary of at most 1024 bytes, copied
//!   and NUL-terminated; anything else (an atom such as `undef`, a longer
//!   iolist, a term that is not an iolist) is passed as NULL, never truncated;
//! - an integer argument is any integer that fits a signed 64-bit word;
//!   anything else (a bignum, an atom, a string) is passed as 0;
//! - the pid is the calling process, formatted like `pid_to_list/1`
//!   (`text::TextBuf::self_pid`, the one term formatter).
//!
//! One deliberate difference, for bounded work: OTP flattens the whole
//! iolist (`enif_inspect_iolist_as_binary`) before it checks the size, so a
//! 1 MB iolist costs a 1 MB copy. Here the walk stops as soon as the string
//! is known to be over 1024 bytes, after [`MAX_VISITS`] terms (cons cells,
//! binaries, empty lists), or below [`MAX_DEPTH`] nested lists, using a
//! fixed stack of pending tails instead of recursion. Such an argument is
//! passed as NULL, as an over-long one is. No heap memory is used.

use std::sync::OnceLock;

use arrayvec::ArrayVec;
use rustler::sys::ErlNifTerm;
use rustler::{Binary, Env, Term};

use crate::atoms;
use crate::probes::Str;

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
    adopt: ErlNifTerm,
    nil: ErlNifTerm,
}

static IMMEDIATES: OnceLock<Immediates> = OnceLock::new();

// The load step: the atoms compared with, then the immediates.
#[cfg(not(test))]
inventory::submit!(crate::load::LoadStep {
    order: crate::load::order::ARGS,
    run: |env| {
        let _ = (atoms::error(), atoms::badarg(), atoms::nif_panicked(), atoms::adopt());
        init(env);
        true
    },
});

/// Records the immediates; called once when the library is loaded.
pub fn init(env: Env<'_>) {
    let _ = IMMEDIATES.set(Immediates {
        undef: atoms::undef().as_c_arg(),
        undefined: atoms::undefined().as_c_arg(),
        adopt: atoms::adopt().as_c_arg(),
        nil: Term::list_new_empty(env).as_c_arg(),
    });
}

/// Is `term` the atom `undef` or `undefined` (an absent argument)?
#[inline(always)]
fn is_absent(term: Term<'_>) -> bool {
    let raw = term.as_c_arg();
    IMMEDIATES.get().is_some_and(|im| raw == im.undef || raw == im.undefined)
}

/// Is the raw term `term` the atom `adopt`: the user tag `p/N` and `pn/N`
/// pass when the caller has no tag of its own (the tag contract,
/// `dtrace_nif:user_tag()`: a binary is that tag, `undefined` no tag,
/// `adopt` "answer `adopt` if enabled, and I call again with the tag I
/// adopted")?
#[inline(always)]
pub fn is_adopt_raw(term: ErlNifTerm) -> bool {
    IMMEDIATES.get().is_some_and(|im| term == im.adopt)
}

/// Is the raw term `term` of `env` the empty list?
#[inline(always)]
pub fn is_nil_raw(env: Env<'_>, term: ErlNifTerm) -> bool {
    match IMMEDIATES.get() {
        Some(im) => term == im.nil,
        // SAFETY: a term of `env`; the VM only reads it.
        None => unsafe { rustler::sys::enif_is_empty_list(env.as_c_arg(), term) != 0 },
    }
}

/// Is `term` the empty list?
#[inline(always)]
fn is_nil(term: Term<'_>) -> bool {
    match IMMEDIATES.get() {
        Some(im) => term.as_c_arg() == im.nil,
        None => term.is_empty_list(),
    }
}

/// A stack buffer for one string argument as the caller gave it (an
/// iolist): up to 1024 bytes and its NUL. Text the library writes itself
/// (a pid, an atom, an mfa) goes in a `TextBuf` (text.rs) instead.
#[derive(Default)]
pub struct StrBuf {
    bytes: Bytes,
}

impl StrBuf {
    /// An empty buffer. Its storage is not initialised (no 1 KB memset).
    #[inline(always)]
    pub fn new() -> Self {
        Self::default()
    }

    /// Copies `term` into the buffer if it is an iolist (or binary) of at
    /// most 1024 bytes, and returns the NUL-terminated copy, borrowed from
    /// the buffer; otherwise returns NULL.
    pub fn iolist_or_null(&mut self, term: Term<'_>) -> Str<'_> {
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
                Flat::Other => read_iolist(term, &mut self.bytes),
            }
        };
        if complete && self.bytes.len() <= MAX_STRING_BYTES {
            self.bytes.push(0);
            Str::from_bytes_with_nul(&self.bytes).unwrap_or(Str::NULL)
        } else {
            Str::NULL
        }
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
}

/// What the iolist walk needs to know about a term. Implemented for
/// rustler's [`Term`], and in the unit tests for a model of terms, so that
/// the walk's semantics and bounds are tested without a VM.
pub trait IoTerm<'a>: Copy {
    /// Is this `[]`?
    fn is_nil(self) -> bool;
    /// Head and tail of a non-empty list.
    fn cons(self) -> Option<(Self, Self)>;
    /// The value of a non-negative integer that fits 32 bits.
    fn small_uint(self) -> Option<u32>;
    /// The bytes of a binary (not a bitstring).
    fn binary(self) -> Option<&'a [u8]>;
}

impl<'a> IoTerm<'a> for Term<'a> {
    #[inline]
    fn is_nil(self) -> bool {
        is_nil(self)
    }
    #[inline]
    fn cons(self) -> Option<(Self, Self)> {
        self.list_get_cell().ok()
    }
    #[inline]
    fn small_uint(self) -> Option<u32> {
        self.decode::<u32>().ok()
    }
    #[inline]
    fn binary(self) -> Option<&'a [u8]> {
        Binary::from_term(self).ok().map(|b| b.as_slice())
    }
}

/// Room for [`MAX_STRING_BYTES`] and one more byte, so that a string one
/// byte over the limit fills it and is then refused.
pub type Bytes = ArrayVec<u8, { MAX_STRING_BYTES + 1 }>;

/// Reads the iolist `term` into `out` (emptied first). `true` when `term`
/// is an iolist of at most [`MAX_STRING_BYTES`] bytes that could be read
/// within [`MAX_VISITS`] terms and [`MAX_DEPTH`] nested lists.
pub fn read_iolist<'a, T: IoTerm<'a>>(term: T, out: &mut Bytes) -> bool {
    out.clear();
    walk(term, out).is_some() && out.len() <= MAX_STRING_BYTES
}

/// The walk behind [`read_iolist`]: `None` when `term` is not an iolist or
/// is over a limit. Iterative, with a fixed stack of pending tails.
fn walk<'a, T: IoTerm<'a>>(term: T, out: &mut Bytes) -> Option<()> {
    let mut pending: ArrayVec<T, MAX_DEPTH> = ArrayVec::new();
    let mut current = term;
    for _ in 0..MAX_VISITS {
        if !current.is_nil() {
            if let Some((head, tail)) = current.cons() {
                if let Some(n) = head.small_uint() {
                    out.try_push(u8::try_from(n).ok()?).ok()?;
                    current = tail;
                } else {
                    // A nested iolist (binary or list): read it, then the tail.
                    if !tail.is_nil() {
                        pending.try_push(tail).ok()?;
                    }
                    current = head;
                }
                continue;
            }
            out.try_extend_from_slice(current.binary()?).ok()?;
        }
        // `current` is done: go on with the innermost pending tail.
        match pending.pop() {
            Some(tail) => current = tail,
            None => return Some(()),
        }
    }
    None
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

#[cfg(test)]
mod tests {
    //! The walk on a model of terms: its semantics (OTP's iolist rules),
    //! its bounds (work and depth), and that it allocates nothing.

    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// A term of the model: an index into an arena of nodes.
    enum Node {
        Nil,
        Cons(usize, usize),
        Int(i64),
        Bin(Vec<u8>),
        Atom,
    }

    #[derive(Default)]
    struct Arena {
        nodes: Vec<Node>,
        /// Questions the walk asked (each would be a call into the VM).
        asked: Cell<usize>,
    }

    #[derive(Clone, Copy)]
    struct M<'a>(&'a Arena, usize);

    impl Arena {
        fn add(&mut self, n: Node) -> usize {
            self.nodes.push(n);
            self.nodes.len() - 1
        }
        fn list(&mut self, items: &[usize], tail: usize) -> usize {
            items.iter().rev().fold(tail, |t, &h| self.add(Node::Cons(h, t)))
        }
        fn nil(&mut self) -> usize {
            self.add(Node::Nil)
        }
        fn chars(&mut self, s: &str) -> usize {
            let items: Vec<usize> = s.bytes().map(|b| self.add(Node::Int(b.into()))).collect();
            let nil = self.nil();
            self.list(&items, nil)
        }
        fn read(&self, t: usize) -> Option<Vec<u8>> {
            self.asked.set(0);
            let mut out = Bytes::new();
            read_iolist(M(self, t), &mut out).then(|| out.to_vec())
        }
    }

    impl<'a> IoTerm<'a> for M<'a> {
        fn is_nil(self) -> bool {
            self.0.asked.set(self.0.asked.get() + 1);
            matches!(self.0.nodes[self.1], Node::Nil)
        }
        fn cons(self) -> Option<(Self, Self)> {
            self.0.asked.set(self.0.asked.get() + 1);
            match self.0.nodes[self.1] {
                Node::Cons(h, t) => Some((M(self.0, h), M(self.0, t))),
                _ => None,
            }
        }
        fn small_uint(self) -> Option<u32> {
            self.0.asked.set(self.0.asked.get() + 1);
            match self.0.nodes[self.1] {
                Node::Int(i) => u32::try_from(i).ok(),
                _ => None,
            }
        }
        fn binary(self) -> Option<&'a [u8]> {
            self.0.asked.set(self.0.asked.get() + 1);
            match &self.0.nodes[self.1] {
                Node::Bin(b) => Some(b),
                _ => None,
            }
        }
    }

    #[test]
    fn iolists_as_otp_reads_them() {
        let mut a = Arena::default();
        let nil = a.nil();
        assert_eq!(a.read(nil), Some(vec![]));
        let abc = a.chars("abc");
        assert_eq!(a.read(abc), Some(b"abc".to_vec()));
        // [$a, <<"bc">>, [$d | <<"e">>], [], [[]]]
        let ch_a = a.add(Node::Int(97));
        let bc = a.add(Node::Bin(b"bc".to_vec()));
        let d = a.add(Node::Int(100));
        let e = a.add(Node::Bin(b"e".to_vec()));
        let de = a.add(Node::Cons(d, e));
        let nil2 = a.nil();
        let inner = a.list(&[nil2], nil);
        let top = a.list(&[ch_a, bc, de, nil2, inner], nil);
        assert_eq!(a.read(top), Some(b"abcde".to_vec()));
        let bin = a.add(Node::Bin(b"xyz".to_vec()));
        assert_eq!(a.read(bin), Some(b"xyz".to_vec()));
    }

    #[test]
    fn non_iolists_are_refused() {
        let mut a = Arena::default();
        let nil = a.nil();
        for bad in [Node::Int(256), Node::Int(-1), Node::Int(1 << 40), Node::Atom] {
            let b = a.add(bad);
            let l = a.list(&[b], nil);
            assert_eq!(a.read(l), None);
        }
        let atom = a.add(Node::Atom);
        assert_eq!(a.read(atom), None);
        let int = a.add(Node::Int(65));
        assert_eq!(a.read(int), None, "a bare integer is not an iolist");
        let improper = a.add(Node::Cons(int, int));
        assert_eq!(a.read(improper), None, "an integer tail is not an iolist");
    }

    #[test]
    fn at_most_1024_bytes() {
        let mut a = Arena::default();
        let s1024 = a.chars(&"x".repeat(1024));
        assert_eq!(a.read(s1024).map(|v| v.len()), Some(1024));
        let s1025 = a.chars(&"x".repeat(1025));
        assert_eq!(a.read(s1025), None);
        let b1025 = a.add(Node::Bin(vec![b'x'; 1025]));
        assert_eq!(a.read(b1025), None);
        let half = a.add(Node::Bin(vec![b'x'; 512]));
        let one = a.add(Node::Int(120));
        let nil = a.nil();
        let exact = a.list(&[half, half], nil);
        assert_eq!(a.read(exact).map(|v| v.len()), Some(1024));
        let over = a.list(&[half, half, one], nil);
        assert_eq!(a.read(over), None);
    }

    /// 100 MB as 100,000 binaries of 1000 bytes: refused after two.
    #[test]
    fn a_huge_iolist_costs_what_its_first_kilobyte_costs() {
        let mut a = Arena::default();
        let kb = a.add(Node::Bin(vec![b'x'; 1000]));
        let nil = a.nil();
        let huge = a.list(&vec![kb; 100_000], nil);
        assert_eq!(a.read(huge), None);
        assert!(a.asked.get() < 20, "asked {} questions", a.asked.get());
    }

    /// Work is bounded by MAX_VISITS whatever the shape: a million empty
    /// binaries (an iolist of 0 bytes), a list nested a million deep.
    #[test]
    fn work_is_bounded_by_the_visit_budget() {
        let mut a = Arena::default();
        let empty = a.add(Node::Bin(vec![]));
        let nil = a.nil();
        let many = a.list(&vec![empty; 1_000_000], nil);
        assert_eq!(a.read(many), None);
        assert!(a.asked.get() <= 4 * MAX_VISITS, "asked {}", a.asked.get());

        let mut deep = a.nil();
        for _ in 0..1_000_000 {
            deep = a.add(Node::Cons(deep, nil));
        }
        assert_eq!(a.read(deep), None);
        assert!(a.asked.get() <= 4 * MAX_VISITS, "asked {}", a.asked.get());
    }

    /// Nesting that keeps tails pending stops at MAX_DEPTH; below it, fine.
    #[test]
    fn depth_is_bounded() {
        let mut a = Arena::default();
        let x = a.add(Node::Bin(b"x".to_vec()));
        let nest = |a: &mut Arena, levels: usize| {
            let mut t = a.nil();
            for _ in 0..levels {
                t = a.add(Node::Cons(t, x));
            }
            t
        };
        let ok = nest(&mut a, MAX_DEPTH);
        assert_eq!(a.read(ok).map(|v| v.len()), Some(MAX_DEPTH));
        let too_deep = nest(&mut a, MAX_DEPTH + 2);
        assert_eq!(a.read(too_deep), None);
    }

    /// Counts this thread's heap allocations (tests run on several threads).
    struct CountingAlloc;
    thread_local! {
        static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    }
    // SAFETY: delegates to the system allocator; the counter is a
    // const-initialised thread-local Cell, which never allocates.
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as ours.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as ours.
            unsafe { System.dealloc(ptr, layout) }
        }
    }
    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    #[test]
    fn reading_allocates_nothing() {
        let mut a = Arena::default();
        let s = a.chars(&"y".repeat(1024));
        let kb = a.add(Node::Bin(vec![b'x'; 1000]));
        let nil = a.nil();
        let huge = a.list(&vec![kb; 10_000], nil);
        let nested = a.list(&[s], nil);
        let mut out = Bytes::new();
        let before = ALLOCATIONS.get();
        assert!(read_iolist(M(&a, s), &mut out));
        assert!(read_iolist(M(&a, nested), &mut out));
        assert!(!read_iolist(M(&a, huge), &mut out));
        assert_eq!(ALLOCATIONS.get(), before);
    }
}
