//! POSIX error names to numbers, for the `errno` argument of
//! `efile_drv__return`.
//!
//! `file` reports a failed call as `{error, Reason}` with `Reason` the
//! lower-case name of the C constant (`enoent`, `eacces`, ...), which the VM
//! made from the OS's errno. The probe passes the number back, as OTP's
//! driver passed the errno it got. Names and numbers come from the
//! platform's own table (the `nix` crate's `Errno`), so they are right on
//! every Unix this builds on.

/// Calls `f(name, number)` for every errno value the platform names, with
/// the name as `file` spells it (`"enoent"`, 2 on Linux).
#[cfg(unix)]
pub fn for_each(mut f: impl FnMut(&str, i32)) {
    use nix::errno::Errno;
    // Errno values are small on every Unix (Linux < 134, BSDs < 130).
    for number in 1..4096 {
        let errno = Errno::from_raw(number);
        if errno != Errno::UnknownErrno {
            // `Errno`'s derived Debug is the C constant's name: `ENOENT`.
            f(&format!("{errno:?}").to_ascii_lowercase(), number);
        }
    }
}

/// No errno names where there is no Unix: the probe passes 0.
#[cfg(not(unix))]
pub fn for_each(_f: impl FnMut(&str, i32)) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn number(name: &str) -> Option<i32> {
        let mut found = None;
        for_each(|n, v| {
            if n == name {
                found = Some(v);
            }
        });
        found
    }

    #[test]
    fn names_are_files_atoms_and_numbers_linuxs() {
        assert_eq!(number("enoent"), Some(2));
        assert_eq!(number("eacces"), Some(13));
        assert_eq!(number("eexist"), Some(17));
        assert_eq!(number("enotdir"), Some(20));
        assert_eq!(number("eisdir"), Some(21));
        assert_eq!(number("ebadf"), Some(9));
        assert_eq!(number("enotempty"), Some(39));
        assert_eq!(number("eagain"), Some(11));
        assert_eq!(number("badarg"), None);
        assert_eq!(number("unknownerrno"), None);
    }

    #[test]
    fn each_number_has_one_name() {
        let mut seen = std::collections::HashSet::new();
        let mut count = 0;
        for_each(|_, v| {
            assert!(seen.insert(v), "errno {v} named twice");
            count += 1;
        });
        assert!(count > 100, "only {count} errno names");
    }
}
