//! `dtrace-catalogue`: prints the probe catalogue.
//!
//! ```text
//! dtrace-catalogue [--arch x86_64|aarch64] json|erlang|notes|markdown|registers|lttng [PROVIDER_FILE]
//! dtrace-catalogue readme README.md [PROVIDER_FILE]    rewrite the README's tables in place
//! ```
//! The provider file defaults to `native/dtrace_nif/probes.d`; the
//! architecture to the one this command was built for.

use std::process::ExitCode;

use dtrace_catalogue::{Arch, parse, render};

const DEFAULT_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../dtrace_nif/probes.d");

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
    let (command, rest) = args.split_first().ok_or("usage: dtrace-catalogue [--arch A] json|erlang|notes|markdown|registers|lttng|readme")?;
    let (readme, rest) = if command == "readme" {
        let (r, rest) = rest.split_first().ok_or("usage: dtrace-catalogue readme README.md [PROVIDER_FILE]")?;
        (Some(r.clone()), rest)
    } else {
        (None, rest)
    };
    let file = rest.first().map_or(DEFAULT_FILE, String::as_str);
    let src = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let provider = parse(&src).map_err(|e| format!("{file}: {e}"))?;
    Ok(match command.as_str() {
        "json" => render::json(&provider, arch),
        "erlang" => render::erlang(&provider, arch),
        "notes" => render::notes(&provider, arch),
        "markdown" => render::markdown(&provider),
        "registers" => render::registers_markdown(),
        "lttng" => render::lttng_markdown(&provider),
        "readme" => {
            let path = readme.unwrap_or_default();
            let doc = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            let doc = render::splice(&doc, "probes", &render::markdown(&provider))
                .and_then(|d| render::splice(&d, "registers", &render::registers_markdown()))
                .and_then(|d| render::splice(&d, "lttng", &render::lttng_markdown(&provider)))
                .ok_or(format!("{path}: no <!-- probes:begin -->, <!-- registers:begin --> or <!-- lttng:begin --> markers"))?;
            std::fs::write(&path, doc).map_err(|e| format!("{path}: {e}"))?;
            String::new()
        }
        other => return Err(format!("unknown command {other}")),
    })
}
