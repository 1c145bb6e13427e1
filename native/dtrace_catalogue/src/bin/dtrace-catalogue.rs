//! `dtrace-catalogue`: prints the probe catalogue, or writes the files
//! generated from it.
//!
//! ```text
//! dtrace-catalogue [--arch x86_64|aarch64] json|erlang|notes|markdown|registers|lttng|vm|efile [PROVIDER_FILE]
//! dtrace-catalogue generate ROOT [PROVIDER_FILE]    rewrite the generated files under ROOT
//! ```
//! The provider file defaults to `native/dtrace_nif/probes.d`; the
//! architecture to the one this command was built for. `generate` writes
//! docs/reference.md's tables, src/api/dtrace_efile.hrl and the efile command
//! tables of priv/bpftrace/efile.bt and priv/dtrace/efile_drv.d (`make generated`).

use std::process::ExitCode;

use dtrace_catalogue::{Arch, parse, render};

const DEFAULT_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../dtrace_nif/probes.d");
const USAGE: &str = "usage: dtrace-catalogue [--arch A] json|erlang|notes|markdown|registers|lttng|vm|efile [FILE] \
                     | generate ROOT [FILE]";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dtrace-catalogue: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mut args: Vec<String>) -> Result<String, String> {
    let mut arch = Arch::from_target_arch(std::env::consts::ARCH).unwrap_or(Arch::X86_64);
    if args.first().map(String::as_str) == Some("--arch") {
        let name = args.get(1).ok_or("--arch needs a value")?;
        arch = Arch::from_target_arch(name).ok_or(format!("no fixed registers for {name}"))?;
        args.drain(..2);
    }
    let (command, rest) = args.split_first().ok_or(USAGE)?;
    let (root, rest) = if command == "generate" {
        let (r, rest) = rest.split_first().ok_or(USAGE)?;
        (Some(std::path::PathBuf::from(r)), rest)
    } else {
        (None, rest)
    };
    let file = rest.first().map_or(DEFAULT_FILE, String::as_str);
    let src = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let c = parse(&src).map_err(|e| format!("{file}: {e}"))?;
    Ok(match command.as_str() {
        "json" => render::json(&c, arch),
        "erlang" => render::erlang(&c, arch),
        "notes" => render::notes(&c.provider, arch),
        "markdown" => render::markdown(&c.provider),
        "registers" => render::registers_markdown(),
        "lttng" => render::lttng_markdown(&c),
        "vm" => render::vm_markdown(&c),
        "efile" => render::efile_markdown(&c),
        "generate" => {
            let root = root.unwrap_or_default();
            let files = render::generated(&c, |path| std::fs::read_to_string(root.join(path)).ok())?;
            for (path, content) in files {
                std::fs::write(root.join(&path), content).map_err(|e| format!("{path}: {e}"))?;
            }
            String::new()
        }
        other => return Err(format!("unknown command {other}; {USAGE}")),
    })
}
