//! The probe catalogue of `dtrace_nif`: what probes exist, what they carry,
//! and where a tracer finds each argument.
//!
//! The catalogue is one D provider file (`native/dtrace_nif/probes.d`), in
//! the syntax of OTP's `erlang_dtrace.d`. This crate reads it ([`parse`])
//! and says, for a target architecture ([`Arch`]), which register argument
//! k sits in and how the `.note.stapsdt` note describes it
//! ([`Arch::note_arg`]). `dtrace_nif`'s build.rs generates the probe sites
//! from it; the `dtrace-catalogue` command prints it as JSON, as the
//! tables of docs/reference.md, or as Erlang terms for the test suites.
//!
//! # Fixed argument registers
//! Argument k of every probe is in the same register, whatever the probe,
//! so a tracer that cannot read `argN` past some N (bpftrace before 0.24
//! stops at arg5) can read the register by name instead:
//!
//! | argument | x86_64 | aarch64 |
//! |---|---|---|
//! | arg0..arg5 | rdi, rsi, rdx, rcx, r8, r9 | x0..x5 |
//! | arg6..arg11 | r10, r11, r12, r13, r14, r15 | x6..x11 |
//!
//! x86_64 has 13 general registers an `asm!` block may name (not rbx, rbp,
//! rsp): twelve of them carry arguments, so a probe has at most
//! [`MAX_ARGS`] = 12. 32-bit arguments are sign- or zero-extended into the
//! full register, and the note names the register's 32-bit view (`%edi`,
//! `w0`), as `sys/sdt.h` does, with the size the type declares.

use std::fmt;

pub mod render;

/// The most arguments a probe may have (registers available on x86_64).
pub const MAX_ARGS: usize = 12;

/// The type of a probe argument, as the provider file declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// `char *`: a NUL-terminated string, or NULL.
    String,
    /// `int64_t`.
    I64,
    /// `int` / `int32_t`.
    I32,
    /// `uint64_t`.
    U64,
    /// `uint32_t` / `unsigned int`.
    U32,
}

/// `unsigned long` is `uint64_t` on the 64-bit Linux targets this library
/// builds probes for (LP64): OTP's LTTng events declare their GC figures
/// that way.
const UNSIGNED_LONG: Type = Type::U64;

impl Type {
    /// The type from its C spelling (`char *`, `const char *`, `int64_t`,
    /// `int`, `int32_t`, `uint64_t`, `uint32_t`, `unsigned int`,
    /// `unsigned long`), with spaces around `*` normalised.
    pub fn from_c(spelling: &str) -> Option<Type> {
        let words: Vec<&str> = spelling.split_whitespace().collect();
        let joined = words.join(" ").replace(" *", "*");
        Some(match joined.as_str() {
            "char*" | "const char*" => Type::String,
            "int64_t" => Type::I64,
            "int" | "int32_t" => Type::I32,
            "uint64_t" => Type::U64,
            "uint32_t" | "unsigned int" => Type::U32,
            "unsigned long" => UNSIGNED_LONG,
            _ => return None,
        })
    }

    /// The canonical C spelling.
    pub fn c_name(self) -> &'static str {
        match self {
            Type::String => "char *",
            Type::I64 => "int64_t",
            Type::I32 => "int",
            Type::U64 => "uint64_t",
            Type::U32 => "uint32_t",
        }
    }

    /// Size in bytes on a 64-bit target, as the note declares it.
    pub fn size(self) -> u8 {
        match self {
            Type::String | Type::I64 | Type::U64 => 8,
            Type::I32 | Type::U32 => 4,
        }
    }

    /// Signed, as the note declares it (`-8@`); pointers are unsigned (`8@`).
    pub fn signed(self) -> bool {
        matches!(self, Type::I64 | Type::I32)
    }

    /// The note's size field: `-8`, `8`, `-4`, `4` (usdt's and sys/sdt.h's).
    pub fn note_size(self) -> String {
        format!("{}{}", if self.signed() { "-" } else { "" }, self.size())
    }
}

/// One argument of a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    /// Its name in the provider file (`user_tag`).
    pub name: String,
    /// Its type.
    pub ty: Type,
}

/// One probe of the provider, or a numbered family of probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The note name (`user_trace__i4s4`), or a numbered family's prefix
    /// (`user_trace__n`).
    pub name: String,
    /// Its arguments, in order (at most [`MAX_ARGS`]).
    pub args: Vec<Arg>,
    /// The comment right before it in the provider file, without `/* */`.
    pub doc: String,
    /// For a numbered family: the first and last label (`user_trace__n0`
    /// .. `user_trace__n950` is `Some((0, 950))`).
    pub labels: Option<(u32, u32)>,
    /// The LTTng-UST provider the probe is also an event of
    /// (`#pragma dtrace_nif lttng PROVIDER` before it; `lttng off` ends
    /// it): one event per probe, named like the probe with single
    /// underscores (`user_trace_i4s4`); a numbered family is one event with
    /// its label as first field.
    pub lttng: Option<String>,
    /// For one of OTP's VM probes (`#pragma dtrace_nif otp_vm SITE
    /// [not_fed REASON]` before it): where OTP fires it and, when no event
    /// of a stock VM can feed it, why.
    pub otp_vm: Option<OtpVm>,
}

/// One of the VM probes of OTP's `erts/emulator/beam/erlang_dtrace.d`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtpVm {
    /// OTP's site that fires it (`file.c:function`, in `erts/emulator/`).
    pub site: String,
    /// `Some(reason)` when no event of a stock VM feeds it (it is declared
    /// so that OTP's scripts naming it run, and never fires).
    pub not_fed: Option<String>,
}

impl Probe {
    /// The LTTng event name: the note name with `__` as `_`.
    pub fn lttng_event(&self) -> String {
        self.name.replace("__", "_")
    }

    /// The LTTng event's fields, in order: `label` (an `int64_t`) first
    /// for a numbered family, then the arguments, each under its C name
    /// ([`lttng_field_name`]).
    pub fn lttng_fields(&self) -> Vec<(String, Type)> {
        let label = self.labels.map(|_| ("label".to_string(), Type::I64));
        label.into_iter().chain(self.args.iter().map(|a| (lttng_field_name(&a.name).to_string(), a.ty))).collect()
    }
}

/// An argument's name as an LTTng field (and C struct member): the same,
/// except `errno`, a C macro, which becomes `errnum`.
pub fn lttng_field_name(arg: &str) -> &str {
    match arg {
        "errno" => "errnum",
        other => other,
    }
}

impl Probe {
    /// The note names of this probe: one, or one per label.
    pub fn note_names(&self) -> Vec<String> {
        match self.labels {
            None => vec![self.name.clone()],
            Some((first, last)) => (first..=last).map(|l| format!("{}{l}", self.name)).collect(),
        }
    }

    /// How many probes this entry stands for.
    pub fn count(&self) -> usize {
        match self.labels {
            None => 1,
            Some((first, last)) => (last - first + 1) as usize,
        }
    }

    /// The C prototype, `name(char *proc, int64_t i1)`.
    pub fn prototype(&self) -> String {
        let args: Vec<String> = self.args.iter().map(|a| c_decl(a.ty, &a.name)).collect();
        format!("{}({})", self.name, args.join(", "))
    }
}

/// The name DTrace gives the probe of note `note`: each `__` becomes `-`
/// (`user_trace__i4s4` is `user_trace-i4s4`), as the D compiler does for a
/// provider file's probes and DTrace's stapsdt provider for notes.
pub fn dtrace_name(note: &str) -> String {
    note.replace("__", "-")
}

/// `char *name`, `int64_t name`.
pub fn c_decl(ty: Type, name: &str) -> String {
    match ty {
        Type::String => format!("char *{name}"),
        _ => format!("{} {name}", ty.c_name()),
    }
}

/// A provider and its probes, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provider {
    /// The provider name (`erlang`).
    pub name: String,
    /// Its probes (numbered families as one entry each).
    pub probes: Vec<Probe>,
    /// `true` for SDT probes (each may also be an LTTng event); `false`
    /// for a provider of LTTng-UST events only (`#pragma dtrace_nif
    /// lttng-only` in its block), whose probes are its events.
    pub sdt: bool,
}

impl Provider {
    /// Every note name the provider has, numbered families expanded.
    pub fn note_names(&self) -> Vec<String> {
        self.probes.iter().flat_map(Probe::note_names).collect()
    }

    /// The number of probes, numbered families expanded.
    pub fn count(&self) -> usize {
        self.probes.iter().map(Probe::count).sum()
    }

    /// The entry named `name` (a numbered family by its prefix).
    pub fn probe(&self, name: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.name == name)
    }
}

/// A target architecture with fixed argument registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// x86_64 (System V registers first, then r10..r15).
    X86_64,
    /// aarch64 (x0..x11).
    Aarch64,
}

const X86_64_REGS: [&str; MAX_ARGS] =
    ["rdi", "rsi", "rdx", "rcx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"];
const X86_64_REGS32: [&str; MAX_ARGS] =
    ["edi", "esi", "edx", "ecx", "r8d", "r9d", "r10d", "r11d", "r12d", "r13d", "r14d", "r15d"];
const AARCH64_REGS: [&str; MAX_ARGS] = ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11"];
const AARCH64_REGS32: [&str; MAX_ARGS] = ["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9", "w10", "w11"];

impl Arch {
    /// The architecture of a Rust `target_arch` value, if it has fixed
    /// registers here.
    pub fn from_target_arch(arch: &str) -> Option<Arch> {
        match arch {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// Its `target_arch` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The 64-bit register that carries argument `k` of every probe, as
    /// `asm!` and bpftrace's `reg()` name it (`r10`). `None` past
    /// [`MAX_ARGS`].
    pub fn register(self, k: usize) -> Option<&'static str> {
        match self {
            Arch::X86_64 => X86_64_REGS.get(k).copied(),
            Arch::Aarch64 => AARCH64_REGS.get(k).copied(),
        }
    }

    /// All argument registers, arg0 first.
    pub fn registers(self) -> &'static [&'static str; MAX_ARGS] {
        match self {
            Arch::X86_64 => &X86_64_REGS,
            Arch::Aarch64 => &AARCH64_REGS,
        }
    }

    /// The note's description of argument `k` of type `ty`: `-8@%rdi`,
    /// `8@%rsi` (a pointer), `-4@%r10d` on x86_64; `-8@x0`, `-4@w6` on
    /// aarch64. `None` past [`MAX_ARGS`].
    pub fn note_arg(self, k: usize, ty: Type) -> Option<String> {
        let (regs, regs32, prefix) = match self {
            Arch::X86_64 => (&X86_64_REGS, &X86_64_REGS32, "%"),
            Arch::Aarch64 => (&AARCH64_REGS, &AARCH64_REGS32, ""),
        };
        let reg = if ty.size() == 4 { regs32.get(k)? } else { regs.get(k)? };
        Some(format!("{}@{prefix}{reg}", ty.note_size()))
    }

    /// The note's argument string for a list of types: the
    /// [`Arch::note_arg`]s joined by spaces.
    pub fn note_args(self, types: &[Type]) -> Option<String> {
        let parts: Option<Vec<String>> = types.iter().enumerate().map(|(k, &t)| self.note_arg(k, t)).collect();
        Some(parts?.join(" "))
    }

    /// How many arguments DTrace reads from registers at a USDT probe it
    /// found through DOF: those of the C calling convention, since `dtrace
    /// -G` sites were function calls (x86_64: `rdi`..`r9`, 6; aarch64:
    /// `x0`..`x7`, 8). It reads argument k past them from the stack, at
    /// `sp + 8 * (k - n)` (dtrace-utils, `dt_cg_tramp_copy_args_from_regs`;
    /// illumos's fasttrap does the same).
    pub fn dof_register_args(self) -> usize {
        match self {
            Arch::X86_64 => 6,
            Arch::Aarch64 => 8,
        }
    }

    /// For a probe of `nargs` arguments with some past
    /// [`Arch::dof_register_args`]: the instructions that copy those
    /// arguments from their fixed registers to the stack, where DTrace
    /// reads them (first at `sp`), and the one that gives the space back.
    /// Neither changes the flags (`lea` on x86_64; `sub`/`add` without `s`
    /// on aarch64), and the space is a multiple of 16 bytes, as aarch64
    /// requires of `sp`. `None` when every argument is in a register
    /// DTrace reads.
    pub fn dof_stack_args(self, nargs: usize) -> Option<(String, String)> {
        let first = self.dof_register_args();
        let extra = nargs.checked_sub(first).filter(|&n| n > 0)?;
        let bytes = (extra * 8).div_ceil(16) * 16;
        let regs = &self.registers()[first..nargs.min(MAX_ARGS)];
        let (alloc, store, free): (String, fn(usize, &str) -> String, String) = match self {
            Arch::X86_64 => (
                format!("lea rsp, [rsp - {bytes}]"),
                |off, reg| format!("mov qword ptr [rsp + {off}], {reg}"),
                format!("lea rsp, [rsp + {bytes}]"),
            ),
            Arch::Aarch64 => (
                format!("sub sp, sp, #{bytes}"),
                |off, reg| format!("str {reg}, [sp, #{off}]"),
                format!("add sp, sp, #{bytes}"),
            ),
        };
        let mut spill = vec![alloc];
        spill.extend(regs.iter().enumerate().map(|(i, reg)| store(i * 8, reg)));
        Some((spill.join("\n"), free))
    }
}

/// Is `s` a C identifier (`[A-Za-z_][A-Za-z0-9_]*`)?
pub fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

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

/// What the provider file declares: the library's SDT probes, the
/// LTTng-only events, the VM feeds and the efile command numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalogue {
    /// The SDT provider (`erlang`): every USDT probe of the library, some
    /// also LTTng events (`#pragma dtrace_nif lttng PROVIDER`).
    pub provider: Provider,
    /// Providers of LTTng-UST events only (OTP's `org_erlang_dyntrace`,
    /// with OTP's field names, types and order).
    pub events: Vec<Provider>,
    /// The VM's feeds: which erl_tracer events feed which probes and
    /// events ([`Feed`]), in file order.
    pub feeds: Vec<Feed>,
    /// OTP's efile command numbers (`efile_drv__entry`'s `command`), in
    /// file order.
    pub efile_commands: Vec<EfileCommand>,
}

/// What an erl_tracer event is about, as a feed names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Processes traced with the feed's trace flags.
    Processes,
    /// Ports traced with the feed's trace flags.
    Ports,
    /// Meta tracing of the spawn BIFs (tracer state `spawn_meta`): no trace
    /// flag on any process.
    SpawnMeta,
    /// A process inside a span (tracer state `span`): `dtrace:span/2` sets
    /// the row's flags on its own process for the outermost span while one
    /// of the row's probes listens, and removes them at its end. Automatic
    /// mode never sets them.
    Spans,
    /// `net_kernel:monitor_nodes/2`'s messages (`nodeup`, `nodedown`),
    /// subscribed to by automatic mode while one of the row's probes
    /// listens: no trace flag.
    NodeMonitor,
    /// The node's system monitor (`erlang:system_monitor/2`: `busy_port`,
    /// `busy_dist_port`), taken by automatic mode while one of the row's
    /// probes listens and nobody else holds it: no trace flag.
    SystemMonitor,
    /// Meta tracing of `erlang:exit/2` (tracer state `exit_meta`), set by
    /// automatic mode while one of the row's probes listens: no trace flag.
    ExitMeta,
}

impl Target {
    /// Its name in the provider file (`processes`, `ports`, `spawn_meta`,
    /// `spans`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Processes => "processes",
            Target::Ports => "ports",
            Target::SpawnMeta => "spawn_meta",
            Target::Spans => "spans",
            Target::NodeMonitor => "node_monitor",
            Target::SystemMonitor => "system_monitor",
            Target::ExitMeta => "exit_meta",
        }
    }

    /// Does the target set trace flags (processes, ports, spans), or is it
    /// a source without flags (meta tracing, a monitor)?
    pub fn has_flags(self) -> bool {
        matches!(self, Target::Processes | Target::Ports | Target::Spans)
    }
}

/// One row of the VM feed table: `#pragma dtrace_nif feed on=TARGET
/// flags=F,.. tags=T,.. sdt=PROBE,.. lttng=EVENT,.. fmt=FUNCTION [auto=no]`. While a
/// tracer listens to one of its SDT probes or LTTng events, automatic mode
/// sets its trace flags on its target, erl_tracer's `enabled/3` answers
/// `trace` for its trace tags, and `trace/5` calls its formatting
/// function, which fires those of its probes and events that listen. A
/// trace tag may be in several rows: each row's function is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feed {
    /// What the events are about.
    pub target: Target,
    /// The trace flags (`erlang:trace/3`) that make the VM send them;
    /// empty for [`Target::SpawnMeta`].
    pub flags: Vec<String>,
    /// erl_tracer's trace tags (`send`, `in_exiting`, ...).
    pub tags: Vec<String>,
    /// The SDT probes (of [`Catalogue::provider`]) it feeds.
    pub sdt: Vec<String>,
    /// The LTTng-only events (of [`Catalogue::events`]) it feeds.
    pub lttng: Vec<String>,
    /// The formatting function (`src/vm/` of dtrace_nif) that fires them.
    pub formatter: String,
    /// Whether automatic mode sets the row's flags while its probes listen
    /// (`auto=no`: the row fires only where the flags are set anyway: by
    /// another row, or by a user's own `{tracer, dtrace, []}`).
    pub auto: bool,
}

/// An efile command: `#pragma dtrace_nif efile_command NAME NUMBER`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EfileCommand {
    /// OTP's name (`OPEN`, `FDATASYNC`).
    pub name: String,
    /// Its number in `efile_drv__entry`'s `command` argument.
    pub number: u32,
}

impl Catalogue {
    /// The LTTng-only event named `name` (`process_spawn`), with its provider.
    pub fn event(&self, name: &str) -> Option<(&Provider, &Probe)> {
        self.events.iter().find_map(|p| p.probe(name).map(|e| (p, e)))
    }

    /// The feeds that fire the SDT probe or LTTng event `name`.
    pub fn feeds_of(&self, name: &str) -> Vec<&Feed> {
        self.feeds.iter().filter(|f| f.sdt.iter().chain(&f.lttng).any(|n| n == name)).collect()
    }

    /// Every trace flag that automatic mode may set on `target`: those of
    /// its `auto` feeds, in file order, once.
    pub fn flags(&self, target: Target) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for f in self.feeds.iter().filter(|f| f.target == target && f.auto) {
            for flag in &f.flags {
                if !all.contains(flag) {
                    all.push(flag.clone());
                }
            }
        }
        all
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

#[cfg(test)]
mod tests {
    use super::*;

    fn probes_d() -> String {
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../dtrace_nif/probes.d")).unwrap()
    }

    #[test]
    fn dof_stack_args_copy_what_dtrace_reads_from_the_stack() {
        assert_eq!(Arch::X86_64.dof_stack_args(6), None);
        assert_eq!(Arch::Aarch64.dof_stack_args(8), None);
        let (spill, free) = Arch::X86_64.dof_stack_args(9).unwrap();
        assert_eq!(
            spill,
            "lea rsp, [rsp - 32]\nmov qword ptr [rsp + 0], r10\nmov qword ptr [rsp + 8], r11\n\
             mov qword ptr [rsp + 16], r12"
        );
        assert_eq!(free, "lea rsp, [rsp + 32]");
        let (spill, free) = Arch::Aarch64.dof_stack_args(10).unwrap();
        assert_eq!(spill, "sub sp, sp, #16\nstr x8, [sp, #0]\nstr x9, [sp, #8]");
        assert_eq!(free, "add sp, sp, #16");
        assert_eq!(dtrace_name("user_trace__i4s4"), "user_trace-i4s4");
        assert_eq!(dtrace_name("message__send"), "message-send");
    }

    #[test]
    fn the_library_catalogue_has_otps_user_and_file_probes() {
        let p = parse(&probes_d()).unwrap().provider;
        assert_eq!(p.name, "erlang");
        assert_eq!(p.count(), 1028);
        let i4s4 = p.probe("user_trace__i4s4").unwrap();
        assert_eq!(
            i4s4.prototype(),
            "user_trace__i4s4(char *proc, char *user_tag, int64_t i1, int64_t i2, int64_t i3, int64_t i4, \
             char *s1, char *s2, char *s3, char *s4)"
        );
        let n = p.probe("user_trace__n").unwrap();
        assert_eq!(n.labels, Some((0, 950)));
        assert_eq!(n.args, i4s4.args);
        assert_eq!(n.note_names().last().unwrap(), "user_trace__n950");
        assert_eq!(p.probe("efile_drv__entry").unwrap().args.len(), 11);
        assert_eq!(p.probe("efile_drv__return").unwrap().args[4], Arg { name: "success".into(), ty: Type::I32 });
        assert!(p.probe("user_trace__s1").unwrap().doc.starts_with("dtrace:user_trace_s1/1"));
    }

    #[test]
    fn argument_k_is_in_the_same_register_in_every_probe() {
        let p = parse(&probes_d()).unwrap().provider;
        for arch in [Arch::X86_64, Arch::Aarch64] {
            for probe in &p.probes {
                for (k, a) in probe.args.iter().enumerate() {
                    let note = arch.note_arg(k, a.ty).unwrap();
                    let reg = arch.register(k).unwrap();
                    // The note names the register or, for a 32-bit
                    // argument, its 32-bit view.
                    let named = note.split('@').nth(1).unwrap().trim_start_matches('%');
                    let view32 = match arch {
                        Arch::X86_64
                            if reg.starts_with("r") && reg.len() <= 3 && reg.as_bytes()[1].is_ascii_digit() =>
                        {
                            format!("{reg}d")
                        }
                        Arch::X86_64 => format!("e{}", &reg[1..]),
                        Arch::Aarch64 => format!("w{}", &reg[1..]),
                    };
                    assert!(named == reg || named == view32, "{} arg{k}: {note} vs {reg}", probe.name);
                }
            }
        }
    }

    #[test]
    fn note_arguments_follow_the_declared_types() {
        let a = Arch::X86_64;
        assert_eq!(a.note_arg(0, Type::String).unwrap(), "8@%rdi");
        assert_eq!(a.note_arg(2, Type::I64).unwrap(), "-8@%rdx");
        assert_eq!(a.note_arg(6, Type::I32).unwrap(), "-4@%r10d");
        assert_eq!(a.note_arg(11, Type::U64).unwrap(), "8@%r15");
        assert_eq!(a.note_arg(3, Type::U32).unwrap(), "4@%ecx");
        assert_eq!(a.note_arg(12, Type::I64), None);
        let b = Arch::Aarch64;
        assert_eq!(b.note_arg(0, Type::String).unwrap(), "8@x0");
        assert_eq!(b.note_arg(7, Type::I32).unwrap(), "-4@w7");
        assert_eq!(b.note_arg(11, Type::I64).unwrap(), "-8@x11");
        assert_eq!(a.note_args(&[Type::String, Type::String, Type::I64]).unwrap(), "8@%rdi 8@%rsi -8@%rdx");
    }

    #[test]
    fn bad_provider_files_say_what_and_where() {
        let cases = [
            ("provider p { probe a(long x); };", "unsupported type 'long'"),
            ("provider p { probe a(int64_t); };", "needs a type and a name"),
            ("provider p { probe a(int x, int x); };", "declared twice"),
            ("provider p { probe a(); probe a(); };", "probe a declared twice"),
            (
                "provider p {\n probe a(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, \
              int a9, int a10, int a11, int a12); };",
                "at most 12",
            ),
            ("provider p { probe 9a(); };", "\"9a\" is not a C identifier"),
            ("provider p { probe a() };", "expected ';'"),
            ("provider p {\n#pragma dtrace_nif numbered n 0 2\n probe m(); };", "followed by probe m"),
            ("provider p {\n#pragma dtrace_nif numbered n 0 2\n probe n(); probe n1(); };", "n1 declared twice"),
            ("provider p {\n#pragma dtrace_nif numbered n 5 2\n probe n(); };", "bad label range"),
            ("#include <x.h>\nprovider p { };", "unsupported directive"),
            ("provider p { }; provider q { };", "one SDT provider"),
            ("", "no provider"),
            ("provider p { probe a(int x); ", "expected 'probe'"),
            ("provider p { probe a(int x); }; /* open", "unterminated comment"),
        ];
        for (src, wanted) in cases {
            let e = parse(src).expect_err(src);
            assert!(e.to_string().contains(wanted), "{src:?}: {e}");
        }
    }

    #[test]
    fn ds_own_pragmas_and_line_comments_are_ignored() {
        let p = parse("#pragma D attributes Evolving/Evolving/Common provider p\n// x\nprovider p {\n// y\nprobe a(const char * s, unsigned int u);\n};").unwrap().provider;
        assert_eq!(
            p.probes[0].args,
            vec![Arg { name: "s".into(), ty: Type::String }, Arg { name: "u".into(), ty: Type::U32 }]
        );
        assert_eq!(p.probes[0].doc, "");
    }

    #[test]
    fn lttng_pragmas_mark_the_probes_that_are_also_events() {
        let p = parse("provider p {\n#pragma dtrace_nif lttng org_x\nprobe a(); probe b__c();\n#pragma dtrace_nif lttng off\nprobe d(); };").unwrap().provider;
        let marks: Vec<_> = p.probes.iter().map(|q| q.lttng.as_deref()).collect();
        assert_eq!(marks, [Some("org_x"), Some("org_x"), None]);
        assert_eq!(p.probes[1].lttng_event(), "b_c");
        assert!(parse("provider p {\n#pragma dtrace_nif lttng a-b\n};").is_err());
        let lib = parse(&probes_d()).unwrap().provider;
        assert_eq!(lib.probe("user_trace__n").unwrap().lttng.as_deref(), Some("org_erlang_dtrace"));
        assert_eq!(lib.probe("efile_drv__entry").unwrap().lttng.as_deref(), Some("org_erlang_dtrace"));
        assert_eq!(lib.probe("message__send").unwrap().lttng, None);
        let fields = |name: &str| -> Vec<String> {
            lib.probe(name).unwrap().lttng_fields().into_iter().map(|(n, _)| n).collect()
        };
        assert_eq!(fields("user_trace__n")[..3], ["label", "proc", "user_tag"]);
        assert_eq!(fields("efile_drv__return").last().map(String::as_str), Some("errnum"));
    }

    #[test]
    fn c_identifiers() {
        for ok in ["a", "_a", "user_trace__n0", "A9_"] {
            assert!(is_c_identifier(ok), "{ok}");
        }
        for bad in ["", "9a", "a-b", "a/b", "../x", "a b", "é"] {
            assert!(!is_c_identifier(bad), "{bad}");
        }
    }
}
