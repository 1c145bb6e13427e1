//! The catalogue as text: JSON (shipped as `priv/dtrace_probes.json`), the
//! README's tables (Markdown), and Erlang terms for the test suites.

use std::fmt::Write as _;

use crate::{Arch, MAX_ARGS, Provider};

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The catalogue as JSON, for `arch`:
///
/// ```text
/// {"provider": "erlang", "arch": "x86_64",
///  "registers": ["rdi", ...],
///  "probes": [{"name": "user_trace__i4s4", "doc": "...",
///              "args": [{"name": "proc", "type": "char *", "register": "rdi", "note": "8@%rdi"}, ...]},
///             {"name": "user_trace__n", "labels": [0, 950], ...}]}
/// ```
///
/// A numbered family is one entry with `labels` [first, last]: its probes
/// are `name` followed by each label. A probe that is also an LTTng event
/// has `"lttng": "provider:event"`.
pub fn json(p: &Provider, arch: Arch) -> String {
    let mut out = String::new();
    let regs: Vec<String> = arch.registers().iter().map(|r| json_str(r)).collect();
    let _ = writeln!(out, "{{\"provider\": {}, \"arch\": {},", json_str(&p.name), json_str(arch.name()));
    let _ = writeln!(out, " \"registers\": [{}],", regs.join(", "));
    out.push_str(" \"probes\": [\n");
    for (i, probe) in p.probes.iter().enumerate() {
        let _ = write!(out, "  {{\"name\": {}, \"doc\": {}", json_str(&probe.name), json_str(&probe.doc));
        if let Some((first, last)) = probe.labels {
            let _ = write!(out, ", \"labels\": [{first}, {last}]");
        }
        if let Some(provider) = &probe.lttng {
            let _ = write!(out, ", \"lttng\": {}", json_str(&format!("{provider}:{}", probe.lttng_event())));
        }
        out.push_str(", \"args\": [");
        for (k, a) in probe.args.iter().enumerate() {
            let _ = write!(
                out,
                "{}{{\"name\": {}, \"type\": {}, \"register\": {}, \"note\": {}}}",
                if k == 0 { "" } else { ", " },
                json_str(&a.name),
                json_str(a.ty.c_name()),
                json_str(arch.register(k).unwrap_or("")),
                json_str(&arch.note_arg(k, a.ty).unwrap_or_default()),
            );
        }
        let _ = writeln!(out, "]}}{}", if i + 1 == p.probes.len() { "" } else { "," });
    }
    out.push_str(" ]}\n");
    out
}

/// The README's probe table (Markdown): probe, arguments with their
/// numbers, description.
pub fn markdown(p: &Provider) -> String {
    let mut out = String::from("| probe (ELF note name) | arguments | what fires it |\n|---|---|---|\n");
    for probe in &p.probes {
        let name = match probe.labels {
            None => format!("`{}`", probe.name),
            Some((first, last)) => format!("`{0}{first}` .. `{0}{last}`", probe.name),
        };
        let args: Vec<String> =
            probe.args.iter().enumerate().map(|(k, a)| format!("arg{k} `{}`", crate::c_decl(a.ty, &a.name))).collect();
        let _ = writeln!(out, "| {name} | {} | {} |", args.join(", "), probe.doc.replace('|', "\\|"));
    }
    out
}

/// The README's table of the LTTng events of the catalogue's probes
/// (Markdown): event, fields with their CTF types, probe.
pub fn lttng_markdown(p: &Provider) -> String {
    let mut out = String::from("| LTTng event | fields | same as probe |\n|---|---|---|\n");
    for probe in p.probes.iter().filter(|q| q.lttng.is_some()) {
        let fields: Vec<String> = probe
            .lttng_fields()
            .iter()
            .map(|(name, ty)| match ty {
                crate::Type::String => format!("`{name}` string"),
                ty => format!("`{name}` {}", ty.c_name()),
            })
            .collect();
        let probe_name = match probe.labels {
            None => format!("`{}`", probe.name),
            Some((first, last)) => format!("`{0}{first}` .. `{0}{last}` (`label`)", probe.name),
        };
        let _ = writeln!(
            out,
            "| `{}:{}` | {} | {probe_name} |",
            probe.lttng.as_deref().unwrap_or_default(),
            probe.lttng_event(),
            fields.join(", ")
        );
    }
    out
}

/// The README's register table (Markdown): argument number, x86_64 and
/// aarch64 registers, bpftrace's `reg()` name.
pub fn registers_markdown() -> String {
    let mut out = String::from("| argument | x86_64 | aarch64 |\n|---|---|---|\n");
    for k in 0..MAX_ARGS {
        let _ = writeln!(
            out,
            "| arg{k} | `{}` | `{}` |",
            Arch::X86_64.register(k).unwrap_or(""),
            Arch::Aarch64.register(k).unwrap_or("")
        );
    }
    out
}

/// An Erlang string literal.
fn erl_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The catalogue as Erlang terms for `file:consult/1`, every probe
/// expanded: `{probe, Name, [{ArgName, Type, Register, Note}]}.`, one per
/// line, after `{provider, Name}.` and `{registers, [...]}.`.
pub fn erlang(p: &Provider, arch: Arch) -> String {
    let mut out = format!("{{provider, {}}}.\n", erl_str(&p.name));
    let regs: Vec<String> = arch.registers().iter().map(|r| erl_str(r)).collect();
    let _ = writeln!(out, "{{registers, [{}]}}.", regs.join(", "));
    for probe in &p.probes {
        let args: Vec<String> = probe
            .args
            .iter()
            .enumerate()
            .map(|(k, a)| {
                format!(
                    "{{{}, {}, {}, {}}}",
                    erl_str(&a.name),
                    erl_str(a.ty.c_name()),
                    erl_str(arch.register(k).unwrap_or("")),
                    erl_str(&arch.note_arg(k, a.ty).unwrap_or_default())
                )
            })
            .collect();
        for name in probe.note_names() {
            let _ = writeln!(out, "{{probe, {}, [{}]}}.", erl_str(&name), args.join(", "));
        }
    }
    out
}

/// Each probe's note as `readelf -n` would show its name and arguments,
/// one line per probe, every probe expanded: `user_trace__s1 8@%rdi`.
pub fn notes(p: &Provider, arch: Arch) -> String {
    let mut out = String::new();
    for probe in &p.probes {
        let types: Vec<crate::Type> = probe.args.iter().map(|a| a.ty).collect();
        let args = arch.note_args(&types).unwrap_or_default();
        for name in probe.note_names() {
            let _ = writeln!(out, "{name} {args}");
        }
    }
    out
}

/// Replaces the text between `<!-- begin -->` and `<!-- end -->` markers
/// (`<!-- {key}:begin -->`) in `doc` with `body`. `None` if the markers are
/// missing.
pub fn splice(doc: &str, key: &str, body: &str) -> Option<String> {
    let begin = format!("<!-- {key}:begin -->\n");
    let end = format!("<!-- {key}:end -->");
    let b = doc.find(&begin)? + begin.len();
    let e = b + doc[b..].find(&end)?;
    Some(format!("{}{}{}", &doc[..b], body, &doc[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn catalogue() -> Provider {
        parse(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dtrace_nif/probes.d")).unwrap())
            .unwrap()
    }

    fn readme() -> String {
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap()
    }

    /// The README's tables are the catalogue's; `make readme-probes`
    /// rewrites them after a change to probes.d.
    #[test]
    fn readme_tables_match_the_catalogue() {
        let doc = readme();
        let p = catalogue();
        let want = splice(&doc, "probes", &markdown(&p)).expect("README has <!-- probes:begin/end --> markers");
        let want = splice(&want, "registers", &registers_markdown()).expect("README has registers markers");
        let want = splice(&want, "lttng", &lttng_markdown(&p)).expect("README has lttng markers");
        assert!(doc == want, "README.md's probe or register table is out of date: run `make readme-probes`");
    }

    #[test]
    fn json_is_well_formed_enough_and_escapes() {
        let p = catalogue();
        let j = json(&p, Arch::X86_64);
        assert!(j.contains("\"name\": \"user_trace__n\", \"doc\": "));
        assert!(j.contains("\"labels\": [0, 950], \"lttng\": \"org_erlang_dtrace:user_trace_n\""));
        assert!(j.contains("{\"name\": \"s1\", \"type\": \"char *\", \"register\": \"r10\", \"note\": \"8@%r10\"}"));
        assert_eq!(j.matches('{').count(), j.matches('}').count());
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn erlang_terms_expand_numbered_probes() {
        let e = erlang(&catalogue(), Arch::X86_64);
        assert_eq!(e.lines().filter(|l| l.starts_with("{probe, ")).count(), 982);
        assert!(e.contains("{probe, \"user_trace__n950\", [{\"proc\", \"char *\", \"rdi\", \"8@%rdi\"}"));
        assert!(e.contains("{\"thread_id\", \"int\", \"rdi\", \"-4@%edi\"}"));
    }
}
