//! The catalogue as text: JSON (shipped as `priv/dtrace_probes.json`), the
//! tables of docs/reference.md (Markdown), Erlang terms for the test suites,
//! and the efile command tables of src/api/dtrace_efile.hrl, priv/bpftrace/efile.bt,
//! priv/dtrace/efile_drv.d and priv/systemtap/efile.stp ([`generated`]).

use std::fmt::Write as _;

use crate::{Arch, Catalogue, MAX_ARGS, Provider, Target, Type};

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
///  "site": [144, 102, 46, 15, 31, 132, 0, 0, 0, 0, 0],
///  "probes": [{"name": "user_trace__i4s4", "doc": "...",
///              "args": [{"name": "proc", "type": "char *", "register": "rdi", "note": "8@%rdi"}, ...]},
///             {"name": "user_trace__n", "labels": [0, 950], ...}],
///  "events": [{"provider": "org_erlang_dyntrace", "name": "process_spawn", "doc": "...",
///              "fields": [{"name": "pid", "type": "char *"}, ...]}],
///  "feeds": [{"on": "processes", "flags": ["send"], "tags": ["send", ...],
///             "sdt": ["message__send", ...], "lttng": ["message_send"], "fmt": "send"}],
///  "efile_commands": [{"name": "OPEN", "number": 1}, ...]}
/// ```
///
/// A numbered family is one entry with `labels` [first, last]: its probes
/// are `name` followed by each label. A probe that is also an LTTng event
/// has `"lttng": "provider:event"`. `events` are the LTTng-only events.
pub fn json(c: &Catalogue, arch: Arch) -> String {
    let p = &c.provider;
    let mut out = String::new();
    let regs: Vec<String> = arch.registers().iter().map(|r| json_str(r)).collect();
    let _ = writeln!(out, "{{\"provider\": {}, \"arch\": {},", json_str(&p.name), json_str(arch.name()));
    let _ = writeln!(out, " \"registers\": [{}],", regs.join(", "));
    let site: Vec<String> = arch.site().iter().map(|b| b.to_string()).collect();
    let _ = writeln!(out, " \"site\": [{}],", site.join(", "));
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
    out.push_str(" ],\n \"events\": [\n");
    let events: Vec<String> = c
        .events
        .iter()
        .flat_map(|ep| ep.probes.iter().map(move |e| (ep, e)))
        .map(|(ep, e)| {
            let fields: Vec<String> = e
                .args
                .iter()
                .map(|a| format!("{{\"name\": {}, \"type\": {}}}", json_str(&a.name), json_str(a.ty.c_name())))
                .collect();
            format!(
                "  {{\"provider\": {}, \"name\": {}, \"doc\": {}, \"fields\": [{}]}}",
                json_str(&ep.name),
                json_str(&e.name),
                json_str(&e.doc),
                fields.join(", ")
            )
        })
        .collect();
    out.push_str(&events.join(",\n"));
    out.push_str("\n ],\n \"feeds\": [\n");
    let list = |v: &[String]| v.iter().map(|x| json_str(x)).collect::<Vec<_>>().join(", ");
    let feeds: Vec<String> = c
        .feeds
        .iter()
        .map(|f| {
            format!(
                "  {{\"on\": {}, \"flags\": [{}], \"tags\": [{}], \"sdt\": [{}], \"lttng\": [{}], \"fmt\": {}, \"auto\": {}}}",
                json_str(f.target.name()),
                list(&f.flags),
                list(&f.tags),
                list(&f.sdt),
                list(&f.lttng),
                json_str(&f.formatter),
                f.auto
            )
        })
        .collect();
    out.push_str(&feeds.join(",\n"));
    out.push_str("\n ],\n \"efile_commands\": [");
    let commands: Vec<String> = c
        .efile_commands
        .iter()
        .map(|e| format!("{{\"name\": {}, \"number\": {}}}", json_str(&e.name), e.number))
        .collect();
    out.push_str(&commands.join(", "));
    out.push_str("]}\n");
    out
}

/// The probe table of docs/reference.md (Markdown): probe, arguments with their
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

/// The table of the LTTng events (Markdown): event, fields with their
/// CTF types, and the probe it mirrors or what feeds it: the user and file
/// probes' `org_erlang_dtrace` events, then OTP's `org_erlang_dyntrace`.
pub fn lttng_markdown(c: &Catalogue) -> String {
    let mut out = String::from("| LTTng event | fields | same as probe, or fed by |\n|---|---|---|\n");
    let field = |(name, ty): &(String, Type)| match ty {
        Type::String => format!("`{name}` string"),
        ty => format!("`{name}` {}", ty.c_name()),
    };
    // A probe's event has the probe's arguments as its fields (the probe
    // table gives them once), with a numbered probe's label first.
    for probe in c.provider.probes.iter().filter(|q| q.lttng.is_some()) {
        let (fields, probe_name) = match probe.labels {
            None => ("the probe's arguments".to_string(), format!("`{}`", probe.name)),
            Some((first, last)) => (
                "`label` int64_t, then the probe's arguments".to_string(),
                format!("`{0}{first}` .. `{0}{last}` (`label`)", probe.name),
            ),
        };
        let _ = writeln!(
            out,
            "| `{}:{}` | {fields} | {probe_name} |",
            probe.lttng.as_deref().unwrap_or_default(),
            probe.lttng_event(),
        );
    }
    for provider in &c.events {
        for event in &provider.probes {
            let fields: Vec<String> = event.lttng_fields().iter().map(field).collect();
            let fed: Vec<String> = c.feeds_of(&event.name).iter().map(|f| feed_source(f)).collect();
            let _ =
                writeln!(out, "| `{}:{}` | {} | {} |", provider.name, event.name, fields.join(", "), fed.join("; "));
        }
    }
    out
}

/// How a feed is written in the tables: `procs: spawn` or
/// `spawn BIFs' meta tracing: call, return_from` (ports: `ports (ports): open`).
fn feed_source(f: &crate::Feed) -> String {
    let tags = f.tags.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ");
    match f.target {
        Target::Processes => format!("{}: {tags}", f.flags.join(" + ")),
        Target::Ports => format!("{} on ports: {tags}", f.flags.join(" + ")),
        Target::SpawnMeta => format!("meta tracing of the spawn BIFs: {tags}"),
        Target::Spans => format!("{} on a process in a span: {tags}", f.flags.join(" + ")),
        Target::NodeMonitor => format!("`net_kernel:monitor_nodes/2`: {tags}"),
        Target::SystemMonitor => format!("`erlang:system_monitor/2`, while free: {tags}"),
        Target::ExitMeta => format!("meta tracing of `erlang:exit/2`: {tags}"),
    }
}

/// The table of OTP's VM probes (Markdown), in the catalogue's order: for
/// each, fed (from which events, through which function) or not fed on a
/// stock VM (why), and the OTP site that fires it.
pub fn otp_vm_markdown(c: &Catalogue) -> String {
    let mut out = String::from(
        "| OTP's probe | on a stock VM | fed from (the feed table's rows) | OTP fires it in (`erts/emulator/beam/`, OTP 27) |\n\
         |---|---|---|---|\n",
    );
    for p in &c.provider.probes {
        let Some(otp) = &p.otp_vm else { continue };
        let (state, from) = match &otp.not_fed {
            Some(reason) => ("not fed".to_string(), reason.clone()),
            None => {
                let rows: Vec<String> = c
                    .feeds
                    .iter()
                    .filter(|f| f.sdt.contains(&p.name))
                    .map(|f| format!("{} (`{}`)", feed_source(f), f.formatter))
                    .collect();
                ("fed".to_string(), rows.join("; "))
            }
        };
        let _ = writeln!(out, "| `{}` | {state} | {from} | `{}` |", p.name, otp.site);
    }
    let fed = c.provider.probes.iter().filter(|p| p.otp_vm.as_ref().is_some_and(|o| o.not_fed.is_none())).count();
    let all = c.provider.probes.iter().filter(|p| p.otp_vm.is_some()).count();
    let _ = writeln!(out, "\n{fed} of OTP's {all} VM probes are fed; the others are declared and never fire.");
    out
}

/// The VM feed table (Markdown): one row per feed: what it is about, its
/// trace flags, erl_tracer's trace tags, the SDT probes and OTP's LTTng
/// events it fires, and its formatting function.
pub fn vm_markdown(c: &Catalogue) -> String {
    let mut out = String::from(
        "| on | trace flags | erl_tracer trace tags | SDT probes | LTTng events (`org_erlang_dyntrace`) | function (`src/vm/`) |\n\
         |---|---|---|---|---|---|\n",
    );
    let auto_note = " (not set by automatic mode for these)";
    let code = |v: &[String]| {
        if v.is_empty() { "-".to_string() } else { v.iter().map(|x| format!("`{x}`")).collect::<Vec<_>>().join(", ") }
    };
    for f in &c.feeds {
        let flags = match f.target {
            Target::SpawnMeta => "none (meta patterns on `erlang:spawn/3`, `spawn_link/3`, `spawn_opt/4`)".to_string(),
            Target::NodeMonitor => "none (a `net_kernel:monitor_nodes/2` subscription of `dtrace_vm`)".to_string(),
            Target::SystemMonitor => {
                "none (`erlang:system_monitor/2`, taken by `dtrace_vm` only while nobody else holds it)".to_string()
            }
            Target::ExitMeta => "none (a meta pattern on `erlang:exit/2`)".to_string(),
            Target::Spans => format!("{} (set by `dtrace:span/2` on its own process, for the span)", code(&f.flags)),
            _ if !f.auto => format!("{}{auto_note}", code(&f.flags)),
            _ => code(&f.flags),
        };
        let _ = writeln!(
            out,
            "| {} | {flags} | {} | {} | {} | `{}` |",
            f.target.name(),
            code(&f.tags),
            code(&f.sdt),
            code(&f.lttng),
            f.formatter
        );
    }
    out
}

/// The efile command table (Markdown): name and number.
pub fn efile_markdown(c: &Catalogue) -> String {
    let mut out = String::from("| command | number |\n|---|---|\n");
    for e in &c.efile_commands {
        let _ = writeln!(out, "| `{}` | {} |", e.name, e.number);
    }
    out
}

/// The register table of docs/reference.md (Markdown): argument number, x86_64 and
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
/// line, after `{provider, Name}.`, `{registers, [...]}.` and `{site, Bytes}.`
/// (every probe site's machine code, `Arch::site`); then
/// `{event, "provider:event", [{Field, Type}]}.` per LTTng-only event,
/// `{feed, On, Flags, Tags, Sdt, Lttng, Fmt, Auto}.` per feed (atoms and lists of
/// atoms, probes as strings) and `{efile_command, Name, Number}.`.
pub fn erlang(c: &Catalogue, arch: Arch) -> String {
    let p = &c.provider;
    let mut out = format!("{{provider, {}}}.\n", erl_str(&p.name));
    let regs: Vec<String> = arch.registers().iter().map(|r| erl_str(r)).collect();
    let _ = writeln!(out, "{{registers, [{}]}}.", regs.join(", "));
    let site: Vec<String> = arch.site().iter().map(|b| b.to_string()).collect();
    let _ = writeln!(out, "{{site, [{}]}}.", site.join(", "));
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
    // Every LTTng event: the probes' own (org_erlang_dtrace), then the
    // LTTng-only ones (org_erlang_dyntrace), with their fields as recorded.
    let event = |out: &mut String, name: String, fields: Vec<(String, Type)>| {
        let fields: Vec<String> =
            fields.iter().map(|(f, ty)| format!("{{{}, {}}}", erl_str(f), erl_str(ty.c_name()))).collect();
        let _ = writeln!(out, "{{event, {}, [{}]}}.", erl_str(&name), fields.join(", "));
    };
    for probe in p.probes.iter().filter(|q| q.lttng.is_some()) {
        let name = format!("{}:{}", probe.lttng.as_deref().unwrap_or_default(), probe.lttng_event());
        event(&mut out, name, probe.lttng_fields());
    }
    for provider in &c.events {
        for e in &provider.probes {
            event(&mut out, format!("{}:{}", provider.name, e.name), e.lttng_fields());
        }
    }
    let atoms = |v: &[String]| v.iter().map(|x| format!("'{x}'")).collect::<Vec<_>>().join(", ");
    let strs = |v: &[String]| v.iter().map(|x| erl_str(x)).collect::<Vec<_>>().join(", ");
    for f in &c.feeds {
        let _ = writeln!(
            out,
            "{{feed, {}, [{}], [{}], [{}], [{}], {}, {}}}.",
            f.target.name(),
            atoms(&f.flags),
            atoms(&f.tags),
            strs(&f.sdt),
            strs(&f.lttng),
            f.formatter,
            f.auto
        );
    }
    for e in &c.efile_commands {
        let _ = writeln!(out, "{{efile_command, '{}', {}}}.", e.name, e.number);
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

/// Replaces the text between the line `{open} {key}:begin{close}` and the
/// line `{open} {key}:end{close}` in `doc` with `body` (which ends with a
/// newline). `None` if the markers are missing.
pub fn splice_with(doc: &str, (open, close): (&str, &str), key: &str, body: &str) -> Option<String> {
    let begin = format!("{open} {key}:begin{close}\n");
    let end = format!("{open} {key}:end{close}");
    let b = doc.find(&begin)? + begin.len();
    let e = b + doc[b..].find(&end)?;
    Some(format!("{}{}{}", &doc[..b], body, &doc[e..]))
}

/// [`splice_with`] for Markdown (`<!-- key:begin -->`).
pub fn splice(doc: &str, key: &str, body: &str) -> Option<String> {
    splice_with(doc, ("<!--", " -->"), key, body)
}

/// The Erlang header with the efile command numbers, for dtrace_file:
/// `-define(OPEN, 1).`, one per command.
pub fn efile_hrl(c: &Catalogue) -> String {
    let mut out = String::from(
        "%% @generated from native/dtrace_nif/probes.d by `make generated`: do not edit.\n\
         %% OTP's efile command numbers (efile_drv.c, OTP 20), the `command'\n\
         %% argument of the efile_drv__* probes.\n",
    );
    for e in &c.efile_commands {
        let _ = writeln!(out, "-define({}, {}).", e.name, e.number);
    }
    out
}

/// The command names as a bpftrace map or D array filled in `BEGIN`
/// (`@command[1] = "OPEN";`), four to a line, indented four spaces.
fn efile_assignments(c: &Catalogue, var: &str) -> String {
    let parts: Vec<String> =
        c.efile_commands.iter().map(|e| format!("{var}[{}] = \"{}\";", e.number, e.name)).collect();
    let mut out = String::new();
    for chunk in parts.chunks(4) {
        out.push_str("    ");
        out.push_str(&chunk.join(" "));
        out.push('\n');
    }
    out
}

/// Every file `make generated` writes from the catalogue, relative to the
/// repository root, with its content: whole files, or the files with
/// their generated regions replaced. `read` gives a file's current
/// content; `None` when a region's markers are missing (the error names
/// the file).
pub fn generated(c: &Catalogue, read: impl Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>, String> {
    let region = |path: &str, markers: (&str, &str), parts: &[(&str, String)]| -> Result<(String, String), String> {
        let mut doc = read(path).ok_or(format!("{path}: cannot be read"))?;
        for (key, body) in parts {
            doc = splice_with(&doc, markers, key, body).ok_or(format!("{path}: no {key}:begin/end markers"))?;
        }
        Ok((path.to_string(), doc))
    };
    Ok(vec![
        region(
            "docs/reference.md",
            ("<!--", " -->"),
            &[
                ("probes", markdown(&c.provider)),
                ("registers", registers_markdown()),
                ("lttng", lttng_markdown(c)),
                ("vm-feeds", vm_markdown(c)),
                ("otp-vm-probes", otp_vm_markdown(c)),
                ("efile-commands", efile_markdown(c)),
            ],
        )?,
        ("src/api/dtrace_efile.hrl".to_string(), efile_hrl(c)),
        region("priv/bpftrace/efile.bt", ("/*", " */"), &[("efile-commands", efile_assignments(c, "@command"))])?,
        region("priv/dtrace/efile_drv.d", ("/*", " */"), &[("efile-commands", efile_assignments(c, "cmd"))])?,
        region("priv/systemtap/efile.stp", ("/*", " */"), &[("efile-commands", efile_assignments(c, "command"))])?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn catalogue() -> Catalogue {
        parse(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dtrace_nif/probes.d")).unwrap())
            .unwrap()
    }

    fn root() -> std::path::PathBuf {
        std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    /// docs/reference.md's tables, src/api/dtrace_efile.hrl and the efile
    /// command tables of the shipped scripts are the catalogue's; `make
    /// generated` rewrites them after a change to probes.d.
    #[test]
    fn generated_files_match_the_catalogue() {
        let c = catalogue();
        let files = generated(&c, |path| std::fs::read_to_string(root().join(path)).ok()).unwrap();
        for (path, want) in files {
            let have = std::fs::read_to_string(root().join(&path)).unwrap_or_default();
            assert!(have == want, "{path} is out of date: run `make generated`");
        }
    }

    #[test]
    fn json_is_well_formed_enough_and_escapes() {
        let c = catalogue();
        let j = json(&c, Arch::X86_64);
        assert!(j.contains("\"name\": \"user_trace__n\", \"doc\": "));
        assert!(j.contains("\"labels\": [0, 950], \"lttng\": \"org_erlang_dtrace:user_trace_n\""));
        assert!(j.contains("{\"name\": \"s1\", \"type\": \"char *\", \"register\": \"r10\", \"note\": \"8@%r10\"}"));
        assert!(j.contains("{\"provider\": \"org_erlang_dyntrace\", \"name\": \"gc_major_end\""));
        assert!(j.contains("{\"on\": \"ports\", \"flags\": [\"running_ports\"], \"tags\": [\"in\", \"out\"], \"sdt\": [], \"lttng\": [\"port_scheduled\"], \"fmt\": \"port_scheduled\", \"auto\": true}"));
        assert!(j.contains("{\"name\": \"FADVISE\", \"number\": 31}]}"));
        assert_eq!(j.matches('{').count(), j.matches('}').count());
        assert_eq!(j.matches('[').count(), j.matches(']').count());
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn erlang_terms_expand_numbered_probes() {
        let e = erlang(&catalogue(), Arch::X86_64);
        assert_eq!(e.lines().filter(|l| l.starts_with("{probe, ")).count(), 1028);
        assert!(e.contains("{probe, \"user_trace__n950\", [{\"proc\", \"char *\", \"rdi\", \"8@%rdi\"}"));
        assert!(e.contains("{\"thread_id\", \"int\", \"rdi\", \"-4@%edi\"}"));
        assert!(e.contains(
            "{event, \"org_erlang_dyntrace:gc_minor_start\", [{\"pid\", \"char *\"}, {\"need\", \"uint64_t\"}"
        ));
        assert!(e.contains("{feed, processes, ['send'], ['send', 'send_to_non_existing_process'], [\"message__send\", \"message__send__remote\"], [\"message_send\"], send, true}."));
        assert!(e.contains("{feed, spawn_meta, [], ['call', 'return_from'], [\"process__spawn\"], [\"process_spawn\"], spawn_meta, true}."));
        assert!(e.contains("{efile_command, 'OPEN', 1}."));
    }

    #[test]
    fn efile_tables() {
        let c = catalogue();
        let hrl = efile_hrl(&c);
        assert!(hrl.contains("-define(OPEN, 1).\n-define(READ, 2).\n"));
        assert!(hrl.contains("-define(FADVISE, 31).\n"));
        assert_eq!(
            efile_assignments(&c, "@c").lines().next(),
            Some("    @c[1] = \"OPEN\"; @c[2] = \"READ\"; @c[3] = \"LSEEK\"; @c[4] = \"WRITE\";")
        );
        assert!(vm_markdown(&c).contains(
            "| processes | `procs` | `unlink`, `getting_unlinked` | `dtrace_process__unlink` | - | `unlink` |"
        ));
    }
}
