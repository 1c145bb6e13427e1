//! The reader of the provider file: D's syntax as OTP's `erlang_dtrace.d`
//! writes it, with this crate's `#pragma dtrace_nif` lines.

use std::fmt;

use super::*;

/// A provider file that cannot be read, with the line where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// A token of the provider file.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Punct(char),
    /// A `/* */` comment's text.
    Comment(String),
    /// A `#pragma` line's words after `#pragma`.
    Pragma(Vec<String>),
}

fn tokenize(src: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let bytes: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at_line_start = |out: &Vec<(usize, Tok)>, line: usize| out.last().is_none_or(|(l, _)| *l < line);
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if bytes.get(i + 1) == Some(&'*') => {
                let start = line;
                let mut j = i + 2;
                let mut text = String::new();
                loop {
                    match bytes.get(j) {
                        None => return Err(ParseError { line: start, message: "unterminated comment".into() }),
                        Some('*') if bytes.get(j + 1) == Some(&'/') => break,
                        Some(&ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            text.push(ch);
                            j += 1;
                        }
                    }
                }
                out.push((start, Tok::Comment(clean_comment(&text))));
                i = j + 2;
            }
            '/' if bytes.get(i + 1) == Some(&'/') => {
                while i < bytes.len() && bytes[i] != '\n' {
                    i += 1;
                }
            }
            '#' if at_line_start(&out, line) => {
                let mut j = i;
                while j < bytes.len() && bytes[j] != '\n' {
                    j += 1;
                }
                let text: String = bytes[i + 1..j].iter().collect();
                let mut words = text.split_whitespace().map(str::to_string);
                if words.next().as_deref() == Some("pragma") {
                    out.push((line, Tok::Pragma(words.collect())));
                } else {
                    return Err(ParseError { line, message: format!("unsupported directive #{}", text.trim()) });
                }
                i = j;
            }
            c if c.is_ascii_alphanumeric() || c == '_' => {
                let mut j = i;
                while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == '_') {
                    j += 1;
                }
                out.push((line, Tok::Word(bytes[i..j].iter().collect())));
                i = j;
            }
            '{' | '}' | '(' | ')' | ';' | ',' | '*' => {
                out.push((line, Tok::Punct(c)));
                i += 1;
            }
            other => return Err(ParseError { line, message: format!("unexpected character {other:?}") }),
        }
    }
    Ok(out)
}

/// A comment's text without its leading `*` decoration, on one line.
fn clean_comment(text: &str) -> String {
    let lines: Vec<&str> =
        text.lines().map(|l| l.trim().trim_start_matches('*').trim()).filter(|l| !l.is_empty()).collect();
    lines.join(" ")
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
}

impl Parser {
    fn line(&self) -> usize {
        self.toks.get(self.pos).or(self.toks.last()).map_or(1, |(l, _)| *l)
    }

    fn err<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError { line: self.line(), message: message.into() })
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(_, t)| t.clone());
        self.pos += 1;
        t
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }

    fn word(&mut self, what: &str) -> Result<String, ParseError> {
        match self.next() {
            Some(Tok::Word(w)) => Ok(w),
            other => {
                self.pos -= 1;
                self.err(format!("expected {what}, found {}", describe(other.as_ref())))
            }
        }
    }

    fn punct(&mut self, p: char) -> Result<(), ParseError> {
        match self.next() {
            Some(Tok::Punct(c)) if c == p => Ok(()),
            other => {
                self.pos -= 1;
                self.err(format!("expected '{p}', found {}", describe(other.as_ref())))
            }
        }
    }
}

fn describe(t: Option<&Tok>) -> String {
    match t {
        None => "end of file".into(),
        Some(Tok::Word(w)) => format!("'{w}'"),
        Some(Tok::Punct(c)) => format!("'{c}'"),
        Some(Tok::Comment(_)) => "a comment".into(),
        Some(Tok::Pragma(_)) => "#pragma".into(),
    }
}

/// Trace flags a feed may name (`erlang:trace/3`'s, for processes and ports).
const TRACE_FLAGS: &[&str] = &[
    "procs",
    "running",
    "exiting",
    "send",
    "receive",
    "call",
    "arity",
    "garbage_collection",
    "ports",
    "running_ports",
    "running_procs",
    "silent",
    "return_to",
    "set_on_spawn",
    "set_on_link",
];

/// Reads a provider file: one SDT provider (`provider NAME { probe ...;
/// ... };`), any number of LTTng-only providers (their block starts with
/// `#pragma dtrace_nif lttng-only`), and at top level the feed table
/// (`#pragma dtrace_nif feed ...`, see [`Feed`]) and the efile commands
/// (`#pragma dtrace_nif efile_command NAME NUMBER`). Comments: the one
/// right before a probe is its doc. In a provider,
/// `#pragma dtrace_nif numbered NAME FIRST LAST` comes before a numbered
/// family and `#pragma dtrace_nif lttng PROVIDER|off` marks the probes that
/// are also LTTng events. Other `#pragma` lines are ignored (D's own, such
/// as `#pragma D attributes`).
///
/// Errors: anything else, an unknown type, a name that is not a C
/// identifier, more than [`MAX_ARGS`] arguments, two probes (or arguments
/// of one probe) with the same name, a numbered family that clashes with
/// another probe's name, no or two SDT providers, a feed naming a probe or
/// event that does not exist (or a numbered family), an unknown target or
/// trace flag, a feed without flags (except on `spawn_meta`), without tags
/// or without probes, two efile commands with the same name or number.
pub fn parse(src: &str) -> Result<Catalogue, ParseError> {
    let mut p = Parser { toks: tokenize(src)?, pos: 0 };
    let mut sdt: Option<Provider> = None;
    let mut events = Vec::new();
    let mut feeds = Vec::new();
    let mut commands: Vec<EfileCommand> = Vec::new();
    while let Some(tok) = p.next() {
        match tok {
            Tok::Comment(_) => {}
            Tok::Pragma(words) => match words.first().zip(words.get(1)) {
                Some((w, k)) if w == "dtrace_nif" && k == "feed" => {
                    feeds.push((p.line(), parse_feed(&p, &words[2..])?))
                }
                Some((w, k)) if w == "dtrace_nif" && k == "efile_command" => {
                    let c = parse_efile_command(&p, &words[2..])?;
                    if commands.iter().any(|o| o.name == c.name || o.number == c.number) {
                        return p.err(format!("efile command {} ({}) declared twice", c.name, c.number));
                    }
                    commands.push(c);
                }
                Some((w, _)) if w == "dtrace_nif" => return p.err(format!("unknown pragma at top level: {words:?}")),
                _ => {}
            },
            Tok::Word(w) if w == "provider" => {
                let provider = parse_provider(&mut p)?;
                if provider.sdt {
                    if sdt.is_some() {
                        return p.err("a provider file declares one SDT provider");
                    }
                    sdt = Some(provider);
                } else {
                    events.push(provider);
                }
            }
            other => {
                p.pos -= 1;
                return p.err(format!("expected 'provider', found {}", describe(Some(&other))));
            }
        }
    }
    let provider = match sdt {
        Some(provider) => provider,
        None => return p.err("no provider declared"),
    };
    let mut seen = std::collections::HashSet::new();
    for name in provider.note_names().into_iter().chain(events.iter().flat_map(Provider::note_names)) {
        if !seen.insert(name.clone()) {
            return Err(ParseError { line: 0, message: format!("probe {name} declared twice") });
        }
    }
    let catalogue = Catalogue { provider, events, feeds: Vec::new(), efile_commands: commands };
    let mut checked = Vec::new();
    for (line, feed) in feeds {
        let err = |message: String| Err(ParseError { line, message });
        for name in &feed.sdt {
            match catalogue.provider.probe(name) {
                Some(probe) if probe.labels.is_none() => {}
                Some(_) => return err(format!("feed: {name} is a numbered family")),
                None => return err(format!("feed: no SDT probe {name}")),
            }
        }
        for name in &feed.lttng {
            if catalogue.event(name).is_none() {
                return err(format!("feed: no LTTng-only event {name}"));
            }
        }
        checked.push(feed);
    }
    for probe in catalogue.provider.probes.iter() {
        let Some(otp) = &probe.otp_vm else { continue };
        let fed = checked.iter().any(|f| f.sdt.contains(&probe.name));
        match (&otp.not_fed, fed) {
            (Some(_), true) => {
                return Err(ParseError {
                    line: 0,
                    message: format!("{} is marked not_fed but a feed names it", probe.name),
                });
            }
            (None, false) => {
                return Err(ParseError {
                    line: 0,
                    message: format!("{} is one of OTP's VM probes, fed, but no feed names it", probe.name),
                });
            }
            _ => {}
        }
    }
    Ok(Catalogue { feeds: checked, ..catalogue })
}

/// `on=TARGET flags=F,.. tags=T,.. [sdt=P,..] [lttng=E,..] fmt=FUNCTION [auto=yes|no]`.
fn parse_feed(p: &Parser, words: &[String]) -> Result<Feed, ParseError> {
    let mut feed = Feed {
        target: Target::Processes,
        flags: Vec::new(),
        tags: Vec::new(),
        sdt: Vec::new(),
        lttng: Vec::new(),
        formatter: String::new(),
        auto: true,
    };
    let mut target = None;
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            return p.err(format!("feed: expected KEY=VALUE, found {word:?}"));
        };
        let list = || -> Result<Vec<String>, ParseError> {
            let items: Vec<String> = value.split(',').filter(|v| !v.is_empty()).map(str::to_string).collect();
            match items.iter().find(|i| !is_c_identifier(i)) {
                Some(bad) => p.err(format!("feed: {key}: {bad:?} is not a C identifier")),
                None => Ok(items),
            }
        };
        match key {
            "on" => {
                target = Some(match value {
                    "processes" => Target::Processes,
                    "ports" => Target::Ports,
                    "spawn_meta" => Target::SpawnMeta,
                    "spans" => Target::Spans,
                    "node_monitor" => Target::NodeMonitor,
                    "system_monitor" => Target::SystemMonitor,
                    "exit_meta" => Target::ExitMeta,
                    other => {
                        return p.err(format!(
                            "feed: unknown target {other:?} (processes, ports, spawn_meta, spans, node_monitor, system_monitor, exit_meta)"
                        ));
                    }
                })
            }
            "flags" => feed.flags = list()?,
            "tags" => feed.tags = list()?,
            "sdt" => feed.sdt = list()?,
            "lttng" => feed.lttng = list()?,
            "fmt" if is_c_identifier(value) => feed.formatter = value.to_string(),
            "fmt" => return p.err(format!("feed: fmt: {value:?} is not a C identifier")),
            "auto" => {
                feed.auto = match value {
                    "yes" => true,
                    "no" => false,
                    other => return p.err(format!("feed: auto={other:?} (yes or no)")),
                }
            }
            other => return p.err(format!("feed: unknown key {other:?}")),
        }
    }
    feed.target = match target {
        Some(t) => t,
        None => return p.err("feed: no on=TARGET"),
    };
    if let Some(bad) = feed.flags.iter().find(|f| !TRACE_FLAGS.contains(&f.as_str())) {
        return p.err(format!("feed: unknown trace flag {bad:?}"));
    }
    match (feed.target.has_flags(), feed.flags.is_empty()) {
        (false, false) => return p.err(format!("feed: on={} sets no trace flag", feed.target.name())),
        (true, true) => return p.err("feed: no flags=..."),
        _ => {}
    }
    if feed.tags.is_empty() {
        return p.err("feed: no tags=...");
    }
    if feed.sdt.is_empty() && feed.lttng.is_empty() {
        return p.err("feed: feeds nothing (no sdt=... or lttng=...)");
    }
    if feed.formatter.is_empty() {
        return p.err("feed: no fmt=FUNCTION");
    }
    Ok(feed)
}

/// `NAME NUMBER`.
fn parse_efile_command(p: &Parser, words: &[String]) -> Result<EfileCommand, ParseError> {
    match words {
        [name, number] if is_c_identifier(name) => match number.parse::<u32>() {
            Ok(number) => Ok(EfileCommand { name: name.clone(), number }),
            Err(_) => p.err(format!("efile_command {name}: bad number {number:?}")),
        },
        _ => p.err(format!("expected '#pragma dtrace_nif efile_command NAME NUMBER', found {words:?}")),
    }
}

fn parse_provider(p: &mut Parser) -> Result<Provider, ParseError> {
    let name = p.word("a provider name")?;
    if !is_c_identifier(&name) {
        return p.err(format!("provider name {name:?} is not a C identifier"));
    }
    p.punct('{')?;
    let mut probes = Vec::new();
    let mut doc = String::new();
    let mut numbered: Option<(String, u32, u32)> = None;
    let mut otp_vm: Option<OtpVm> = None;
    let mut lttng: Option<String> = None;
    let mut sdt = true;
    loop {
        match p.next() {
            Some(Tok::Punct('}')) => break,
            Some(Tok::Comment(text)) => doc = text,
            Some(Tok::Pragma(words)) => match words.as_slice() {
                [w, kind] if w == "dtrace_nif" && kind == "lttng-only" => {
                    if !probes.is_empty() {
                        return p.err("#pragma dtrace_nif lttng-only comes before the provider's first probe");
                    }
                    sdt = false;
                    lttng = Some(name.clone());
                }
                [w, kind, provider] if w == "dtrace_nif" && kind == "lttng" => {
                    lttng = match provider.as_str() {
                        "off" => None,
                        name if is_c_identifier(name) => Some(name.to_string()),
                        name => return p.err(format!("LTTng provider {name:?} is not a C identifier")),
                    };
                }
                [w, kind, site, rest @ ..] if w == "dtrace_nif" && kind == "otp_vm" => {
                    let not_fed = match rest {
                        [] => None,
                        [nf, reason @ ..] if nf == "not_fed" && !reason.is_empty() => Some(reason.join(" ")),
                        _ => {
                            return p.err(format!(
                                "expected '#pragma dtrace_nif otp_vm SITE [not_fed REASON]', found {words:?}"
                            ));
                        }
                    };
                    otp_vm = Some(OtpVm { site: site.clone(), not_fed });
                }
                [w, ..] if w == "dtrace_nif" => numbered = Some(parse_numbered(p, &words)?),
                _ => {}
            },
            Some(Tok::Word(w)) if w == "probe" => {
                let mut probe = parse_probe(p, std::mem::take(&mut doc), numbered.take())?;
                if !sdt && probe.labels.is_some() {
                    return p.err("an LTTng-only provider has no numbered families");
                }
                probe.lttng = lttng.clone();
                probe.otp_vm = otp_vm.take();
                if probe.otp_vm.is_some() && (!sdt || probe.labels.is_some()) {
                    return p.err("#pragma dtrace_nif otp_vm marks a single SDT probe");
                }
                probes.push(probe);
            }
            other => {
                p.pos -= 1;
                return p.err(format!("expected 'probe' or '}}', found {}", describe(other.as_ref())));
            }
        }
    }
    if numbered.is_some() {
        return p.err("#pragma dtrace_nif numbered is not followed by a probe");
    }
    if otp_vm.is_some() {
        return p.err("#pragma dtrace_nif otp_vm is not followed by a probe");
    }
    p.punct(';')?;
    Ok(Provider { name, probes, sdt })
}

fn parse_numbered(p: &Parser, words: &[String]) -> Result<(String, u32, u32), ParseError> {
    match words {
        [_, kind, name, first, last] if kind == "numbered" => match (first.parse::<u32>(), last.parse::<u32>()) {
            (Ok(f), Ok(l)) if f <= l => Ok((name.clone(), f, l)),
            _ => p.err(format!("bad label range {first}..{last}")),
        },
        _ => p.err(format!("expected '#pragma dtrace_nif numbered NAME FIRST LAST', found {words:?}")),
    }
}

fn parse_probe(p: &mut Parser, doc: String, numbered: Option<(String, u32, u32)>) -> Result<Probe, ParseError> {
    let name = p.word("a probe name")?;
    if !is_c_identifier(&name) {
        return p.err(format!("probe name {name:?} is not a C identifier"));
    }
    let labels = match numbered {
        None => None,
        Some((n, first, last)) if n == name => Some((first, last)),
        Some((n, _, _)) => return p.err(format!("#pragma dtrace_nif numbered {n} is followed by probe {name}")),
    };
    p.punct('(')?;
    let mut args: Vec<Arg> = Vec::new();
    if p.peek() == Some(&Tok::Punct(')')) {
        p.pos += 1;
    } else {
        let mut words = Vec::new();
        loop {
            match p.next() {
                Some(Tok::Word(w)) => words.push(w),
                Some(Tok::Punct('*')) => words.push("*".into()),
                Some(Tok::Punct(c @ (',' | ')'))) => {
                    let arg = parse_arg(p, &name, &words)?;
                    if args.iter().any(|a| a.name == arg.name) {
                        return p.err(format!("probe {name}: argument {} declared twice", arg.name));
                    }
                    args.push(arg);
                    if c == ')' {
                        break;
                    }
                    words.clear();
                }
                other => {
                    p.pos -= 1;
                    return p.err(format!("probe {name}: unexpected {}", describe(other.as_ref())));
                }
            }
        }
    }
    p.punct(';')?;
    if args.len() > MAX_ARGS {
        return p.err(format!("probe {name} has {} arguments; at most {MAX_ARGS}", args.len()));
    }
    Ok(Probe { name, args, doc, labels, lttng: None, otp_vm: None })
}

fn parse_arg(p: &Parser, probe: &str, words: &[String]) -> Result<Arg, ParseError> {
    let Some((name, ty_words)) = words.split_last() else {
        return p.err(format!("probe {probe}: empty argument"));
    };
    if name == "*" || ty_words.is_empty() {
        return p.err(format!("probe {probe}: every argument needs a type and a name ({})", words.join(" ")));
    }
    if !is_c_identifier(name) {
        return p.err(format!("probe {probe}: argument name {name:?} is not a C identifier"));
    }
    match Type::from_c(&ty_words.join(" ")) {
        Some(ty) => Ok(Arg { name: name.clone(), ty }),
        None => p.err(format!(
            "probe {probe}: argument {name}: unsupported type '{}' (char *, int64_t, int, uint64_t, uint32_t, \
             unsigned long)",
            ty_words.join(" ")
        )),
    }
}
