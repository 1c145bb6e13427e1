//! A provider's definition and its checks: names, counts, duplicates.

use std::io;
use std::path::PathBuf;

use dtrace_catalogue::{MAX_ARGS, Type, is_c_identifier};

/// The longest provider or probe name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// The most probes one provider may have.
pub const MAX_PROBES: usize = 1024;

/// The most providers loaded in one node at once. A deleted provider stays
/// loaded, and counted, until its last handle is garbage-collected.
pub const MAX_PROVIDERS: usize = 1024;

/// Why a definition was refused, naming the offending probe by its index
/// in the list given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The provider name is not a C identifier of 1..=64 bytes.
    ProviderName,
    /// The provider has no probes.
    NoProbes,
    /// More than [`MAX_PROBES`] probes.
    TooManyProbes,
    /// Probe `i`'s name is not a C identifier of 1..=64 bytes.
    ProbeName(usize),
    /// Probe `i` has more than [`MAX_ARGS`] arguments.
    TooManyArgs(usize),
    /// Probe `i` has the name of an earlier probe.
    DuplicateProbe(usize),
}

/// Why [`Provider::new`](super::Provider::new) failed.
#[derive(Debug)]
pub enum NewError {
    /// A bad definition.
    Invalid(Invalid),
    /// A provider of this name is defined (and not deleted) in this node.
    AlreadyDefined,
    /// [`MAX_PROVIDERS`] providers are loaded.
    TooManyProviders,
    /// Creating the private directory or writing the object failed.
    Io(io::Error),
    /// `dlopen` refused the object (e.g. the directory is on a `noexec`
    /// file system): its path, and the loader's message.
    Dlopen(PathBuf, String),
    /// No SDT probes on this platform (not Linux on x86_64 or aarch64).
    Unsupported,
}

/// One probe of a definition: its name and argument types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDef {
    /// The note name.
    pub name: String,
    /// The argument types (`int` is [`Type::I64`], `string` [`Type::String`]).
    pub types: Vec<Type>,
}

/// Checks a definition: names, counts, duplicates, in the order given
/// (the first problem is reported).
pub fn validate(provider: &str, probes: &[ProbeDef]) -> Result<(), Invalid> {
    if !name_ok(provider) {
        return Err(Invalid::ProviderName);
    }
    if probes.is_empty() {
        return Err(Invalid::NoProbes);
    }
    for (i, p) in probes.iter().enumerate() {
        if i == MAX_PROBES {
            return Err(Invalid::TooManyProbes);
        }
        check_probe(&probes[..i], p)?;
    }
    Ok(())
}

/// Is `s` a C identifier of at most [`MAX_NAME_BYTES`] bytes?
pub fn name_ok(s: &str) -> bool {
    s.len() <= MAX_NAME_BYTES && is_c_identifier(s)
}

/// Checks probe `p`, which comes after `earlier`: its name, its number of
/// arguments, and that no earlier probe has its name (the index in the
/// error is `earlier.len()`).
pub fn check_probe(earlier: &[ProbeDef], p: &ProbeDef) -> Result<(), Invalid> {
    let i = earlier.len();
    if !name_ok(&p.name) {
        return Err(Invalid::ProbeName(i));
    }
    if p.types.len() > MAX_ARGS {
        return Err(Invalid::TooManyArgs(i));
    }
    if earlier.iter().any(|q| q.name == p.name) {
        return Err(Invalid::DuplicateProbe(i));
    }
    Ok(())
}
