//! The name each port was opened with, and the process that opened it,
//! kept from the port's `open` event until its `closed` event: OTP's
//! `port__command` and `port__exit` pass the port's name
//! (`erlang:port_info(P, name)`: `"cat"` for `open_port({spawn, "cat"},
//! ...)`, `"tcp_inet"` for a socket), which neither event carries.
//!
//! Bounded: a fixed table of [`BUCKETS`] buckets of [`WAYS`] slots, in the
//! library's static memory (no allocation), keyed by the port's text
//! (`#Port<0.5>`, the same whether the VM keeps local ports as immediates or
//! not); a name is cut at [`TEXT_BYTES`]` - 1` bytes like every text. Each
//! operation hashes the key and looks at one bucket, under a lock held for
//! those few comparisons and copies. A full bucket drops the new port (its
//! name is then unknown); a port whose `closed` event is not seen (it closed
//! while nobody traced ports) keeps its slot until a port of the same text
//! opens again, which replaces it.

use std::sync::{Mutex, PoisonError};

/// The longest name kept, with room for a NUL (the VM probes' text
/// buffers are as long: `text::TEXT_BYTES`, OTP's `DTRACE_TERM_BUF_SIZE`).
const TEXT_BYTES: usize = 256;

/// Buckets in the table.
const BUCKETS: usize = 128;
/// Slots per bucket.
const WAYS: usize = 8;
/// The longest key (a port's text, `#Port<0.123456789>`) kept; longer
/// ones are not kept.
const KEY_BYTES: usize = 40;
/// The longest opener's text kept (`<0.123.0>`); longer ones are not.
const OWNER_BYTES: usize = 40;

/// One port's entry. `key_len == 0`: free.
#[derive(Clone, Copy)]
struct Slot {
    key: [u8; KEY_BYTES],
    key_len: u8,
    owner: [u8; OWNER_BYTES],
    owner_len: u8,
    name: [u8; TEXT_BYTES],
    name_len: u16,
}

const FREE: Slot =
    Slot { key: [0; KEY_BYTES], key_len: 0, owner: [0; OWNER_BYTES], owner_len: 0, name: [0; TEXT_BYTES], name_len: 0 };

impl Slot {
    fn key(&self) -> &[u8] {
        &self.key[..self.key_len as usize]
    }
}

static TABLE: Mutex<[[Slot; WAYS]; BUCKETS]> = Mutex::new([[FREE; WAYS]; BUCKETS]);

/// FNV-1a of the key, folded to a bucket.
fn bucket(key: &[u8]) -> usize {
    let h = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (h ^ (h >> 32)) as usize % BUCKETS
}

/// What is known of a port.
pub(crate) struct Known<'a> {
    /// The name it was opened with.
    pub(crate) name: &'a [u8],
    /// The text of the process that opened it.
    pub(crate) owner: &'a [u8],
}

/// Keeps `name` and `owner` for the port whose text is `port` (text
/// without NUL). Returns whether it was kept.
pub(crate) fn insert(port: &[u8], owner: &[u8], name: &[u8]) -> bool {
    if port.is_empty() || port.len() > KEY_BYTES {
        return false;
    }
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let ways = &mut table[bucket(port)];
    // The same port again (its earlier `closed` unseen), else a free slot.
    let Some(slot) = ways.iter().position(|s| s.key() == port).or_else(|| ways.iter().position(|s| s.key_len == 0))
    else {
        return false;
    };
    let s = &mut ways[slot];
    s.key[..port.len()].copy_from_slice(port);
    s.key_len = port.len() as u8;
    let owner = if owner.len() <= OWNER_BYTES { owner } else { &[] };
    s.owner[..owner.len()].copy_from_slice(owner);
    s.owner_len = owner.len() as u8;
    let name = &name[..name.len().min(TEXT_BYTES - 1)];
    s.name[..name.len()].copy_from_slice(name);
    s.name_len = name.len() as u16;
    true
}

/// Runs `f` with what is known of the port whose text is `port`, if
/// anything; removes the entry when `remove`.
pub(crate) fn with<R>(port: &[u8], remove: bool, f: impl FnOnce(Option<Known<'_>>) -> R) -> R {
    if port.is_empty() || port.len() > KEY_BYTES {
        return f(None);
    }
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let ways = &mut table[bucket(port)];
    match ways.iter().position(|s| s.key() == port) {
        Some(i) => {
            let slot = ways[i];
            if remove {
                ways[i].key_len = 0;
            }
            drop(table);
            f(Some(Known { name: &slot.name[..slot.name_len as usize], owner: &slot.owner[..slot.owner_len as usize] }))
        }
        None => {
            drop(table);
            f(None)
        }
    }
}

/// Makes `owner` the process connected to the known port `port` (after
/// its `connect`); false when the port is not known or the text too long.
pub(crate) fn set_owner(port: &[u8], owner: &[u8]) -> bool {
    if port.is_empty() || port.len() > KEY_BYTES || owner.len() > OWNER_BYTES {
        return false;
    }
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    let ways = &mut table[bucket(port)];
    match ways.iter_mut().find(|s| s.key() == port) {
        Some(s) => {
            s.owner[..owner.len()].copy_from_slice(owner);
            s.owner_len = owner.len() as u8;
            true
        }
        None => false,
    }
}

/// How many ports are known (tests).
#[cfg(test)]
fn known() -> usize {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner).iter().flatten().filter(|s| s.key_len != 0).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is process-wide: these tests use keys of their own and
    /// run one at a time.
    static LOCK: Mutex<()> = Mutex::new(());

    #[test]
    fn connect_moves_the_owner() {
        let _g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(insert(b"#Port<9.7>", b"<0.84.0>", b"cat"));
        assert!(set_owner(b"#Port<9.7>", b"<0.99.0>"));
        assert_eq!(with(b"#Port<9.7>", true, |k| k.map(|k| k.owner.to_vec())).as_deref(), Some(&b"<0.99.0>"[..]));
        assert!(!set_owner(b"#Port<9.7>", b"<0.99.0>"));
    }

    fn name_of(port: &[u8]) -> Option<Vec<u8>> {
        with(port, false, |k| k.map(|k| k.name.to_vec()))
    }

    #[test]
    fn kept_until_closed() {
        let _g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(insert(b"#Port<9.1>", b"<0.84.0>", b"cat"));
        assert_eq!(name_of(b"#Port<9.1>").as_deref(), Some(&b"cat"[..]));
        let owner = with(b"#Port<9.1>", true, |k| k.map(|k| k.owner.to_vec()));
        assert_eq!(owner.as_deref(), Some(&b"<0.84.0>"[..]));
        assert_eq!(name_of(b"#Port<9.1>"), None);
        // Opened again under the same text: the new name.
        assert!(insert(b"#Port<9.2>", b"<0.84.0>", b"cat"));
        assert!(insert(b"#Port<9.2>", b"<0.85.0>", b"tcp_inet"));
        assert_eq!(name_of(b"#Port<9.2>").as_deref(), Some(&b"tcp_inet"[..]));
        with(b"#Port<9.2>", true, |_| ());
    }

    #[test]
    fn bounded() {
        let _g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let before = known();
        let keys: Vec<Vec<u8>> = (0..BUCKETS * WAYS * 2).map(|i| format!("#Port<8.{i}>").into_bytes()).collect();
        let kept = keys.iter().filter(|k| insert(k, b"<0.1.0>", b"x")).count();
        assert!(kept <= BUCKETS * WAYS - before);
        assert!(kept > BUCKETS * WAYS / 2, "kept {kept}");
        // A full bucket drops the port: its name is unknown, nothing else breaks.
        assert!(keys.iter().any(|k| name_of(k).is_none()));
        for k in &keys {
            with(k, true, |_| ());
        }
        assert_eq!(known(), before);
        // Over-long keys and names.
        assert!(!insert(&[b'p'; KEY_BYTES + 1], b"<0.1.0>", b"x"));
        let long = vec![b'n'; TEXT_BYTES * 2];
        assert!(insert(b"#Port<9.3>", b"<0.1.0>", &long));
        assert_eq!(name_of(b"#Port<9.3>").map(|n| n.len()), Some(TEXT_BYTES - 1));
        with(b"#Port<9.3>", true, |_| ());
    }
}
