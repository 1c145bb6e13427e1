//! What a raw term's bits say without asking the VM.

use rustler::sys::ErlNifTerm;

/// The raw term's bits if it is an immediate (a local pid or port, an
/// atom, a small integer, `[]`): a value that names itself. The text `%T`
/// writes for it is the same for the life of the node, so `TextBuf::term` caches
/// it under those bits, and it takes no heap words (`flat_size`). ERTS's
/// primary tag, the two low bits of a term, is `11` for immediates and
/// only for them (erts/emulator/beam/erl_term.h, `TAG_PRIMARY_IMMED1`; so
/// in OTP 25 to 27 and long before). One AND instead of two calls into the
/// VM (`enif_term_type`, `enif_get_local_pid`). If ERTS ever changed it,
/// the worst outcome would be a wrong size or a stale cached text, never a
/// bad memory access: nothing is dereferenced on its word.
#[inline(always)]
pub(crate) fn immediate_bits(raw: ErlNifTerm) -> Option<usize> {
    // SAFETY: rustler declares ErlNifTerm `#[repr(transparent)]` over a
    // usize (ERL_NIF_UINT): the same bits, read by value.
    let bits = unsafe { std::mem::transmute::<ErlNifTerm, usize>(raw) };
    (bits & 0b11 == 0b11).then_some(bits)
}
