//! The probe catalogue of `dtrace_nif`: what probes exist, what they carry,
//! and where a tracer finds each argument.
//!
//! The catalogue is one D provider file (`native/dtrace_nif/probes.d`), in
//! the syntax of OTP's `erlang_dtrace.d`. This crate reads it ([`parse()`])
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

mod parse;
pub mod render;

pub use parse::{ParseError, parse};

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

    /// The machine code of every probe's site, the instruction a tracer
    /// breaks on (the note's location and the DOF's offset are its first
    /// byte):
    /// - x86_64: `nop` (90), then a 10-byte `nop` (`66 2e 0f 1f 84 00 00 00
    ///   00 00`, `cs nopw 0x0(%rax,%rax,1)`), the form of libbpf's `usdt.h`
    ///   since July 2026. Every tracer puts its breakpoint on the `nop`,
    ///   which the kernel emulates (never optimized, never single-stepped
    ///   out of line, never touching the stack). A tracer that knows the
    ///   form may probe the 10-byte `nop` at +1 instead, where the kernel
    ///   optimizes that one (libbpf's reason for the form); a kernel that
    ///   does not refuses a probe there (its `cs` prefix), as 6.18 does.
    ///   Never a 5-byte `nop` (`0f 1f 44 00 00`): 6.18 rewrites a probe on it
    ///   into a `call` whose trampoline pushes 32 bytes below the stack
    ///   pointer, into the red zone (ARCHITECTURE.md, "The probe site").
    /// - aarch64: `nop` (d503201f): no kernel optimizes a uprobe there.
    pub fn site(self) -> &'static [u8] {
        match self {
            Arch::X86_64 => &[0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
            Arch::Aarch64 => &[0x1f, 0x20, 0x03, 0xd5],
        }
    }

    /// [`Arch::site`] as assembler text for `asm!`: `.byte` directives on
    /// x86_64 (no mnemonic pins the 10-byte `nop`'s encoding); `nop` on
    /// aarch64, whose assembler marks `.byte` in code as data.
    pub fn site_asm(self) -> String {
        match self {
            Arch::X86_64 => {
                let bytes: Vec<String> = self.site().iter().map(|b| format!("{b:#04x}")).collect();
                format!(".byte {}", bytes.join(", "))
            }
            Arch::Aarch64 => "nop".to_string(),
        }
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
    /// another row, or by a user's own `{tracer, dtrace_tracer, []}`).
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

#[cfg(test)]
mod tests;
