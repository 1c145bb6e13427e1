//! Providers defined, fired and deleted in this process, without a VM:
//! the loader accepts the objects, sites run, semaphores are the
//! ones the notes name, and files and mappings go away.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

use dtrace_catalogue::{MAX_ARGS, Type};

use super::dir::stale_pid;
use super::*;
use crate::probes::Str;

fn def(name: &str, types: &[Type]) -> ProbeDef {
    ProbeDef { name: name.to_string(), types: types.to_vec() }
}

fn two_probes() -> Vec<ProbeDef> {
    vec![def("request__start", &[Type::I64, Type::String]), def("all", &[Type::I64; MAX_ARGS])]
}

/// Lines of /proc/self/maps naming `path` (also once it is removed:
/// `path (deleted)`).
fn mappings(path: &Path) -> usize {
    let maps = fs::read_to_string("/proc/self/maps").unwrap();
    let path = path.to_str().unwrap();
    maps.lines().filter(|l| l.ends_with(path) || l.ends_with(&format!("{path} (deleted)"))).count()
}

#[test]
fn a_provider_is_a_loaded_file_in_a_private_directory() {
    let p = Provider::new("cargo_test_loaded", &two_probes()).unwrap();
    let path = p.path().to_path_buf();
    let dir = path.parent().unwrap();
    let dir_name = dir.file_name().unwrap().to_str().unwrap();
    assert!(dir_name.starts_with(&format!("dtrace-{}-", std::process::id())), "{dir_name}");
    assert_eq!(fs::metadata(dir).unwrap().mode() & 0o777, 0o700);
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert!(path.file_name().unwrap().to_str().unwrap().starts_with("cargo_test_loaded."));
    assert!(mappings(&path) >= 2, "text and data mapped");
    let names: Vec<&str> = p.probes().iter().map(Probe::name).collect();
    assert_eq!(names, ["all", "request__start"]);
    assert_eq!(p.probe("request__start").unwrap().types(), [Type::I64, Type::String]);
    assert!(p.probe("nope").is_none());
    drop(p);
    assert!(!path.exists());
    assert_eq!(mappings(&path), 0, "dlclose unmapped it");
}

#[test]
fn a_raised_semaphore_enables_its_probe_and_the_site_runs() {
    let p = Provider::new("cargo_test_fire", &two_probes()).unwrap();
    let (start, all) = (p.probe("request__start").unwrap(), p.probe("all").unwrap());
    assert!(!start.enabled() && !all.enabled());
    // As a tracer does: raise the semaphore (here from the inside).
    all.semaphore().fetch_add(1, Relaxed);
    assert!(all.enabled() && !start.enabled());
    let s = c"twelve";
    let mut r = Registers::new();
    for k in 0..MAX_ARGS {
        r.set_int(k, -(k as i64));
    }
    r.set_str(1, Str::from_cstr(s));
    r.set_int(MAX_ARGS, 99); // past the registers: ignored
    for _ in 0..1000 {
        all.fire(&r);
        start.fire(&r);
    }
    all.semaphore().fetch_sub(1, Relaxed);
    assert!(!all.enabled());
}

#[test]
fn delete_removes_the_file_and_frees_the_name_but_keeps_the_mapping() {
    let p = Provider::new("cargo_test_delete", &two_probes()).unwrap();
    let path = p.path().to_path_buf();
    assert!(matches!(Provider::new("cargo_test_delete", &two_probes()), Err(NewError::AlreadyDefined)));
    assert!(p.delete());
    assert!(p.is_deleted() && !path.exists());
    assert!(!p.delete(), "once");
    assert!(mappings(&path) >= 2, "still mapped until dropped");
    // The site still runs (a fire that raced the delete).
    p.probe("all").unwrap().fire(&Registers::new());
    let again = Provider::new("cargo_test_delete", &two_probes()).unwrap();
    assert_ne!(again.path(), path);
    drop(p);
    assert!(again.path().exists(), "dropping the old one leaves the new one alone");
    assert!(matches!(Provider::new("cargo_test_delete", &two_probes()), Err(NewError::AlreadyDefined)));
}

#[test]
fn definitions_are_checked_in_order() {
    let bad = |name: &str, probes: &[ProbeDef]| validate(name, probes).unwrap_err();
    let ok = two_probes();
    for name in ["", "1x", "../x", "a/b", "a-b", "a b", "é", &"x".repeat(65)] {
        assert_eq!(bad(name, &ok), Invalid::ProviderName, "{name:?}");
    }
    assert!(validate(&"x".repeat(64), &ok).is_ok());
    assert_eq!(bad("p", &[]), Invalid::NoProbes);
    assert_eq!(bad("p", &[ok[0].clone(), def("a:b", &[])]), Invalid::ProbeName(1));
    assert_eq!(bad("p", &[def(&"y".repeat(65), &[])]), Invalid::ProbeName(0));
    assert_eq!(bad("p", &[ok[0].clone(), def("x", &[Type::I64; 13])]), Invalid::TooManyArgs(1));
    assert_eq!(bad("p", &[def("a", &[]), def("b", &[]), def("a", &[])]), Invalid::DuplicateProbe(2));
    let many: Vec<ProbeDef> = (0..=MAX_PROBES).map(|i| def(&format!("p{i}"), &[])).collect();
    assert_eq!(bad("p", &many), Invalid::TooManyProbes);
    assert!(validate("p", &many[..MAX_PROBES]).is_ok());
    assert!(matches!(Provider::new("a/b", &ok), Err(NewError::Invalid(Invalid::ProviderName))));
}

#[test]
fn the_largest_provider_loads() {
    let many: Vec<ProbeDef> = (0..MAX_PROBES).map(|i| def(&format!("probe_{i}"), &[Type::String; MAX_ARGS])).collect();
    let p = Provider::new("cargo_test_largest", &many).unwrap();
    assert_eq!(p.probes().len(), MAX_PROBES);
    let last = p.probe("probe_1023").unwrap();
    last.semaphore().fetch_add(1, Relaxed);
    assert!(last.enabled() && p.probes().iter().filter(|q| q.enabled()).count() == 1);
    last.fire(&Registers::new());
    last.semaphore().fetch_sub(1, Relaxed);
}

/// Four threads fire without pause while another deletes the provider
/// and drops its reference: they stop firing once they see it deleted,
/// and the object is closed only after the last of them lets go.
#[test]
fn concurrent_fires_and_a_delete_do_not_crash() {
    use std::sync::atomic::AtomicU64;
    let p = std::sync::Arc::new(Provider::new("cargo_test_race", &two_probes()).unwrap());
    let path = p.path().to_path_buf();
    p.probe("all").unwrap().semaphore().fetch_add(1, Relaxed);
    let fired = std::sync::Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (p, fired) = (p.clone(), fired.clone());
            std::thread::spawn(move || {
                let probe = p.probe("all").unwrap();
                while !p.is_deleted() && probe.enabled() {
                    probe.fire(&Registers::new());
                    fired.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    while fired.load(Relaxed) < 10_000 {
        std::thread::yield_now();
    }
    assert!(p.delete());
    drop(p);
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(mappings(&path), 0);
}

#[test]
fn stale_directories_of_dead_processes_are_removed() {
    let base = std::env::temp_dir().join(format!("dtrace-cargo-test-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).unwrap();
    // A pid that no longer runs: a child that has exited.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let make = |name: &str, mode: u32| {
        let dir = base.join(name);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("myapp.1.so"), b"x").unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        dir
    };
    let stale = make(&format!("dtrace-{dead_pid}-aB3xYz"), 0o700);
    let mine = make(&format!("dtrace-{}-aB3xYz", std::process::id()), 0o700);
    let alive = make("dtrace-1-aB3xYz", 0o700); // init
    let not_private = make(&format!("dtrace-{dead_pid}-Qq1234"), 0o755);
    let other_name = make(&format!("dtrace-{dead_pid}-toolong"), 0o700);
    let other_files = make(&format!("dtrace-{dead_pid}-Zz9876"), 0o700);
    fs::write(other_files.join("keep.txt"), b"x").unwrap();
    std::os::unix::fs::symlink(&stale, base.join(format!("dtrace-{dead_pid}-Ln0000"))).unwrap();
    remove_stale_dirs(&base);
    assert!(!stale.exists());
    for kept in [&mine, &alive, &not_private, &other_name] {
        assert!(kept.join("myapp.1.so").exists(), "{kept:?}");
    }
    // Objects go, other files and so the directory stay.
    assert!(!other_files.join("myapp.1.so").exists() && other_files.join("keep.txt").exists());
    fs::remove_dir_all(&base).unwrap();
}

/// Defining and dropping, 3000 times: the count of loaded providers
/// (the limit's) comes back.
#[test]
fn churn_leaves_the_count_as_it_was() {
    for _ in 0..3000 {
        let p = Provider::new("cargo_test_churn", &two_probes()).unwrap();
        p.delete();
    }
    assert!(loaded() < 16, "{} loaded: only other tests' providers", loaded());
}

#[test]
fn private_directory_names_give_their_pid() {
    assert_eq!(stale_pid(b"dtrace-1234-aB3xYz"), Some(1234));
    assert_eq!(stale_pid(b"dtrace-1234-aB3xY"), None);
    assert_eq!(stale_pid(b"dtrace-1234-aB3x.z"), None);
    assert_eq!(stale_pid(b"dtrace-x-aB3xYz"), None);
    assert_eq!(stale_pid(b"dtrace_demo.1234"), None);
    assert_eq!(stale_pid(b"other-1234-aB3xYz"), None);
}
