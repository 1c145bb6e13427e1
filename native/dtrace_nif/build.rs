//! Generates the probes, their LTTng events and the VM feeds from the
//! catalogue, `probes.d`.
//!
//! Rust is generated with `quote!` from the templates of `src/probes.rs`
//! (`sdt_site!`, `lttng_event!`, `lttng_state!`), which hold every `unsafe`
//! block and its safety argument: the generated code has none. Writes:
//!
//! - `$OUT_DIR/probes.rs`, included by `src/probes.rs`: for each probe of
//!   provider `erlang`, a module named like the probe
//!   (`probes::user_trace__i4s4`), and for each LTTng-only event a module
//!   under its provider (`probes::org_erlang_dyntrace::process_spawn`). Every
//!   module has the same API: `enabled()` (any sink listens: one load per
//!   sink) and `fire(args...)` (fires in every sink that listens); numbered
//!   families take a label first. Under them, `sdt_enabled()` and
//!   `lttng_enabled()` per sink, the semaphore (`SEMAPHORE`, `SEMAPHORES`),
//!   the site and the event. Plus `listened()` (the names of every probe and
//!   event with a listener) and, for the unit tests, every semaphore and a
//!   call of every site.
//! - `$OUT_DIR/feeds.rs`, included by `src/vm/mod.rs`: the VM feed table as
//!   code (which rows listen, the dispatch to each row's formatting
//!   function, the trace flags per target), and `$OUT_DIR/trace_tags.rs`,
//!   included by `src/vm/event.rs`: its `TraceTag` and `Target`, which the
//!   formatting functions read (so they need not read the feed table).
//! - `$OUT_DIR/dtrace_probes.json` and `dtrace_probes.eterm` (the same as
//!   Erlang terms, for `file:consult/1`), installed in `priv/`.
//! - With the LTTng sink: the tracepoint headers of `org_erlang_dtrace` and
//!   `org_erlang_dyntrace`, their call sites, and the provider package
//!   `libdtrace_lttng_tp.so` (module `lttng` below).
//!
//! The SDT backend is chosen by target: Linux x86_64 and aarch64
//! (`cfg(dtrace_sdt)`) get sites; elsewhere `sdt_enabled()` is `false` and
//! the site does nothing, with the same signatures.
//!
//! The library layout: on Linux, the cdylib is linked with `-z
//! separate-code`, so that its executable segment's file offset equals its
//! virtual address. rust-lld's default layout loads the text segment 0x1000
//! above its file offset, and perf (6.1) takes a note's address for a file
//! offset: its uprobes then land on the wrong instruction.

use std::env;
use std::fs;
use std::path::PathBuf;

use dtrace_catalogue::{Arch, Catalogue, Probe, Provider, Target, Type};
use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote};

fn main() {
    println!("cargo:rerun-if-changed=probes.d");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(dtrace_sdt)");
    println!("cargo::rustc-check-cfg=cfg(dtrace_lttng)");

    let src = fs::read_to_string("probes.d").expect("read probes.d");
    let catalogue = dtrace_catalogue::parse(&src).unwrap_or_else(|e| panic!("probes.d: {e}"));

    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    // SDT sites (and their DOF records) on Linux; on illumos and FreeBSD
    // (x86_64) too, where DTrace finds them through DOF only.
    let sdt = match os.as_str() {
        "linux" | "android" => Arch::from_target_arch(&arch),
        "illumos" | "freebsd" if arch == "x86_64" => Some(Arch::X86_64),
        _ => None,
    };
    if sdt.is_some() {
        println!("cargo:rustc-cfg=dtrace_sdt");
    }
    if sdt.is_some() && os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,separate-code");
    } else if os == "linux" {
        println!("cargo:warning=dtrace_nif: no fixed probe registers for {arch}: built without probes");
    }

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let lttng = sdt.is_some() && os == "linux" && lttng::build(&catalogue, &out);
    let backend = Backend { sdt, lttng };
    fs::write(out.join("probes.rs"), lines(probes(&catalogue, backend))).expect("write probes.rs");
    let (feed_items, tags) = feeds(&catalogue);
    fs::write(out.join("feeds.rs"), lines(feed_items)).expect("write feeds.rs");
    fs::write(out.join("trace_tags.rs"), lines(vec![tags])).expect("write trace_tags.rs");
    fs::write(out.join("dof_probes.rs"), lines(dof_probes(&catalogue))).expect("write dof_probes.rs");
    let arch = sdt.unwrap_or(Arch::X86_64);
    let json = dtrace_catalogue::render::json(&catalogue, arch);
    fs::write(out.join("dtrace_probes.json"), json).expect("write dtrace_probes.json");
    let terms = dtrace_catalogue::render::erlang(&catalogue, arch);
    fs::write(out.join("dtrace_probes.eterm"), terms).expect("write dtrace_probes.eterm");
}

/// Module `dof`'s table: every SDT probe by catalogue index as DOF
/// describes it (DTrace's name, the note name as its function, the
/// argument types), and the size of the DOF the library writes from it
/// (one probe site and one is-enabled site per probe), computed by the
/// same writer, the `dof` crate, so that the library's buffer is sized
/// to it.
fn dof_probes(c: &Catalogue) -> Vec<TokenStream> {
    let mut rows = Vec::new();
    let mut probes = std::collections::BTreeMap::new();
    for probe in &c.provider.probes {
        let types: Vec<&str> = probe.args.iter().map(|a| a.ty.c_name()).collect();
        for note in probe.note_names() {
            let name = dtrace_catalogue::dtrace_name(&note);
            rows.push(quote! { DofProbe { name: #name, function: #note, args: &[#(#types),*] } });
            let i = probes.len() as u32;
            let dof_probe = dof::Probe {
                name: name.clone(),
                function: note.clone(),
                address: 0,
                offsets: vec![i],
                enabled_offsets: vec![i],
                arguments: types.iter().map(|t| t.to_string()).collect(),
            };
            probes.insert(name, dof_probe);
        }
    }
    let provider = dof::Provider { name: c.provider.name.clone(), probes };
    let section =
        dof::Section { providers: [(provider.name.clone(), provider)].into_iter().collect(), ..Default::default() };
    let size = dof::serialize_section(&section).len();
    let count = rows.len();
    let provider_name = &c.provider.name;
    vec![
        quote! {
            /// The provider's name (`probes::PROVIDER`).
            pub const PROVIDER: &str = #provider_name;
        },
        quote! {
            /// Every SDT probe as DOF describes it, by catalogue index.
            pub static DOF_PROBES: [DofProbe; #count] = [#(#rows),*];
        },
        quote! {
            /// The bytes of the DOF the library writes.
            pub const DOF_SIZE: usize = #size;
        },
    ]
}

/// Generated items as source text, one top-level item per line (so that a
/// compiler message points to one item), after a header.
fn lines(items: Vec<TokenStream>) -> String {
    let mut out = String::from("// @generated by build.rs from probes.d. Do not edit.\n");
    for item in items {
        out.push_str(&item.to_string());
        out.push('\n');
    }
    out
}

/// The sinks this build fires in.
#[derive(Clone, Copy)]
struct Backend {
    /// SDT sites, for this architecture's registers.
    sdt: Option<Arch>,
    /// The LTTng-UST sink (lttng-ust's headers were found).
    lttng: bool,
}

/// Rust keywords an argument name may not be (they get a trailing `_`).
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
    "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self",
    "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract",
    "become", "box", "do", "final", "macro", "override", "priv", "typeof", "unsized", "virtual", "yield", "try",
    "label",
];

fn ident(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// An argument's Rust name.
fn arg_ident(name: &str) -> Ident {
    if KEYWORDS.contains(&name) { format_ident!("{name}_") } else { ident(name) }
}

fn rust_type(ty: Type) -> TokenStream {
    match ty {
        Type::String => quote!(Str<'_>),
        Type::I64 => quote!(i64),
        Type::I32 => quote!(i32),
        Type::U64 => quote!(u64),
        Type::U32 => quote!(u32),
    }
}

/// The C type of an LTTng event field, as the shim's struct declares it.
fn c_field_type(ty: Type) -> TokenStream {
    match ty {
        Type::String => quote!(*const ::std::ffi::c_char),
        Type::I64 => quote!(i64),
        Type::I32 => quote!(i32),
        Type::U64 => quote!(u64),
        Type::U32 => quote!(u32),
    }
}

/// The value an argument puts in its register: 64 bits, 32-bit types
/// sign- or zero-extended, so that a tracer reading the whole register
/// (bpftrace's `reg()`) sees the declared value.
fn register_value(ty: Type, name: &Ident) -> TokenStream {
    match ty {
        Type::String => quote!(#name.as_ptr()),
        Type::I64 | Type::U64 => quote!(#name),
        Type::I32 => quote!(i64::from(#name)),
        Type::U32 => quote!(u64::from(#name)),
    }
}

/// `keep_declared_sites()`: a call of the `fire` of every probe nothing
/// fires (OTP's VM probes marked `not_fed`), behind a condition the
/// compiler cannot decide, so that their sites, and with them their notes,
/// stay in the library: a site nobody calls is dead code, and the linker
/// drops it with its note. The condition is always false at run time.
fn declared_sites(c: &Catalogue) -> TokenStream {
    let calls = c.provider.probes.iter().filter(|p| p.otp_vm.as_ref().is_some_and(|o| o.not_fed.is_some())).map(|p| {
        let name = ident(&p.name);
        let args = p.args.iter().map(|a| match a.ty {
            Type::String => quote!(crate::probes::Str::NULL),
            _ => quote!(0),
        });
        quote! { #name::fire(#(#args),*); }
    });
    quote! {
        /// Keeps the sites (and notes) of the probes nothing fires; the load
        /// step calls it once. Fires nothing: `black_box(false)` is false,
        /// but the compiler cannot tell.
        #[cfg_attr(test, allow(dead_code))]
        pub(crate) fn keep_declared_sites() {
            if std::hint::black_box(false) {
                #(#calls)*
            }
        }
    }
}

/// The probes of provider `erlang` and the LTTng-only events, with the
/// crate-wide helpers.
fn probes(c: &Catalogue, backend: Backend) -> Vec<TokenStream> {
    let provider = &c.provider.name;
    let count = c.provider.count();
    // Each probe's index in the catalogue (numbered families expanded): the
    // key of its DOF site records (module `dof`).
    let mut next_index = 0;
    let modules: Vec<TokenStream> = c
        .provider
        .probes
        .iter()
        .map(|p| {
            let first = next_index;
            next_index += p.count();
            probe_module(&c.provider, p, first, backend)
        })
        .collect();
    let event_providers = c.events.iter().map(|ep| {
        let name = ident(&ep.name);
        let doc = format!("The LTTng-only events of provider `{}`.", ep.name);
        let modules = ep.probes.iter().map(|e| probe_module(ep, e, 0, backend));
        quote! {
            #[doc = #doc]
            #[allow(non_snake_case, dead_code)]
            pub(crate) mod #name {
                #[allow(unused_imports)]
                use super::*;
                #(#modules)*
            }
        }
    });
    let mut items = vec![
        quote! {
            /// The provider name of every SDT probe.
            pub const PROVIDER: &str = #provider;
        },
        quote! {
            /// How many SDT probes the library has, numbered families expanded.
            pub const PROBE_COUNT: usize = #count;
        },
    ];
    items.extend(modules);
    items.extend(event_providers);
    items.push(declared_sites(c));
    items.push(listened(c));
    items.push(test_support(c));
    items
}

/// One probe's (or LTTng-only event's) module: `enabled`, `fire`, and the
/// sinks under them.
fn probe_module(provider: &Provider, probe: &Probe, first_index: usize, backend: Backend) -> TokenStream {
    let name = ident(&probe.name);
    let title = match probe.labels {
        None => format!("`{}`.", probe.prototype()),
        Some((first, last)) => format!(
            "`{}<label>({})`, labels {first}..={last}.",
            probe.name,
            probe.prototype().split_once('(').map_or("", |(_, a)| a.trim_end_matches(')'))
        ),
    };
    let doc = &probe.doc;
    let numbered = probe.labels.is_some();
    let args: Vec<Ident> = probe.args.iter().map(|a| arg_ident(&a.name)).collect();
    let types: Vec<TokenStream> = probe.args.iter().map(|a| rust_type(a.ty)).collect();
    let (label_param, label_arg) =
        if numbered { (quote!(label: usize,), quote!(label,)) } else { (quote!(), quote!()) };
    let label_only = if numbered { quote!(label) } else { quote!() };
    let label_only_param = if numbered { quote!(label: usize) } else { quote!() };
    let unused_label = if numbered { quote!(let _ = label;) } else { quote!() };

    let consts = probe.labels.map(|(first, last)| {
        let (first, last, n) = (first as usize, last as usize, (last - first + 1) as usize);
        quote! {
            /// The first label.
            pub(crate) const FIRST: usize = #first;
            /// The last label.
            pub(crate) const LAST: usize = #last;
            /// How many probes the family has.
            pub(crate) const COUNT: usize = #n;
        }
    });

    let sdt = provider.sdt.then_some(backend.sdt).flatten();
    let sdt_part = match (provider.sdt, sdt) {
        (false, _) => quote! {
            /// An LTTng-only event has no SDT probe.
            #[inline(always)]
            pub(crate) fn sdt_enabled() -> bool {
                false
            }
            #[inline(always)]
            fn site(#(#args: #types),*) {
                let _ = (#(#args,)*);
            }
        },
        (true, None) => quote! {
            /// No SDT probes on this target: never enabled.
            #[inline(always)]
            pub(crate) fn sdt_enabled(#label_only_param) -> bool {
                #unused_label
                false
            }
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn site(#label_param #(#args: #types),*) {
                let _ = (#label_arg #(#args,)*);
            }
        },
        (true, Some(arch)) => sdt_part(provider, probe, first_index, arch, &args),
    };

    let lttng_part = match (&probe.lttng, backend.lttng) {
        (Some(lttng_provider), true) => lttng_part(lttng_provider, probe, &args),
        _ => quote! {
            /// Is an LTTng session recording the probe's event? Never: it has
            /// none, or this build has no LTTng sink.
            #[inline(always)]
            pub(crate) fn lttng_enabled() -> bool {
                false
            }
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn event(#label_param #(#args: #types),*) {
                let _ = (#label_arg #(#args,)*);
            }
        },
    };
    let fire_doc = if numbered {
        "Fires probe `label` in every sink that listens: the SDT site (nothing for a label outside the family) \
         and the LTTng event."
    } else {
        "Fires the probe in every sink that listens: the SDT site and the LTTng event."
    };
    quote! {
        #[doc = #title]
        #[doc = ""]
        #[doc = #doc]
        // Generated code is one line: its `} if` is not a missing `else`.
        // (The lint's name is possible_missing_else in clippy 1.95 and
        // suspicious_else_formatting in 1.85, Debian 13's: both are allowed
        // here and below, with unknown_lints for the one each lacks.)
        #[allow(non_snake_case, dead_code, unknown_lints, clippy::suspicious_else_formatting, clippy::possible_missing_else)]
        pub(crate) mod #name {
            #[allow(unused_imports)]
            use super::*;
            #consts
            /// Is a tracer listening, in any sink? One load per sink.
            #[inline(always)]
            pub(crate) fn enabled(#label_only_param) -> bool {
                sdt_enabled(#label_only) || lttng_enabled()
            }
            #[doc = #fire_doc]
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            pub(crate) fn fire(#label_param #(#args: #types),*) {
                if sdt_enabled(#label_only) {
                    site(#label_arg #(#args),*);
                }
                if lttng_enabled() {
                    event(#label_arg #(#args),*);
                }
            }
            #sdt_part
            #lttng_part
        }
    }
}

/// A probe's semaphore(s), `sdt_enabled` and its site(s), from the
/// `sdt_site!` template.
fn sdt_part(provider: &Provider, probe: &Probe, first_index: usize, arch: Arch, args: &[Ident]) -> TokenStream {
    let types: Vec<TokenStream> = probe.args.iter().map(|a| rust_type(a.ty)).collect();
    let note_args = arch
        .note_args(&probe.args.iter().map(|a| a.ty).collect::<Vec<_>>())
        .expect("at most MAX_ARGS arguments (checked by the parser)");
    let operands: Vec<TokenStream> = probe
        .args
        .iter()
        .zip(args)
        .enumerate()
        .map(|(k, (a, name))| {
            let reg = Literal::string(arch.register(k).expect("at most MAX_ARGS arguments"));
            let value = register_value(a.ty, name);
            quote!(#reg = #value)
        })
        .collect();
    let provider_name = &provider.name;
    let (stack, free) = arch.dof_stack_args(probe.args.len()).unwrap_or_default();
    let reg0 = Literal::string(arch.register(0).expect("a first register"));
    // Unsuffixed: the templates put the index into assembler directives.
    let index_of =
        |label: u32| Literal::usize_unsuffixed(first_index + (label - probe.labels.map_or(0, |l| l.0)) as usize);
    let semaphore_doc = "Raised by each tracer while it listens: a `sys/sdt.h` semaphore (16 bits, in `.probes`), \
                         whose address the note gives. An atomic, so every call re-reads it.";
    match probe.labels {
        None => {
            let note = &probe.name;
            let index = index_of(0);
            quote! {
                #[doc = #semaphore_doc]
                #[unsafe(link_section = ".probes")]
                pub(crate) static SEMAPHORE: AtomicU16 = AtomicU16::new(0);
                /// Is a tracer listening on the SDT probe: its semaphore, or
                /// DTrace through DOF (only once the library's DOF was
                /// registered: one more load until then)?
                #[inline(always)]
                pub(crate) fn sdt_enabled() -> bool {
                    SEMAPHORE.load(Relaxed) != 0 || (crate::dof::active() && dof_is_enabled())
                }
                /// The probe's DOF is-enabled site.
                #[inline(never)]
                fn dof_is_enabled() -> bool {
                    crate::probes::dof_is_enabled_site!(#index, #reg0)
                }
                /// The site: a `nop` with its note, each argument in its register.
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                fn site(#(#args: #types),*) {
                    crate::probes::sdt_site!(#provider_name, #note, "{semaphore}", #note_args, #index,
                                             #stack, #free, semaphore = sym SEMAPHORE, [#(#operands),*]);
                }
            }
        }
        Some((first, last)) => {
            let arms = (first..=last).map(|label| {
                let note = format!("{}{label}", probe.name);
                let sem = format!("{{semaphores}}+{}", (label - first) as usize * 2);
                let index = index_of(label);
                let label = label as usize;
                quote! {
                    #label => crate::probes::sdt_site!(#provider_name, #note, #sem, #note_args, #index,
                                                       #stack, #free, semaphores = sym SEMAPHORES, [#(#operands),*]),
                }
            });
            let enabled_arms = (first..=last).map(|label| {
                let index = index_of(label);
                let label = label as usize;
                quote! { #label => crate::probes::dof_is_enabled_site!(#index, #reg0), }
            });
            quote! {
                #[doc = #semaphore_doc]
                #[unsafe(link_section = ".probes")]
                pub(crate) static SEMAPHORES: [AtomicU16; COUNT] = [const { AtomicU16::new(0) }; COUNT];
                /// Is a tracer listening on the SDT probe of `label`: its
                /// semaphore, or DTrace through DOF (only once the library's
                /// DOF was registered)? `false` for a label outside the family.
                #[inline(always)]
                pub(crate) fn sdt_enabled(label: usize) -> bool {
                    label.checked_sub(FIRST).and_then(|i| SEMAPHORES.get(i)).is_some_and(|s| s.load(Relaxed) != 0)
                        || (crate::dof::active() && dof_is_enabled(label))
                }
                /// The DOF is-enabled site of `label` (`false` outside the family).
                #[inline(never)]
                fn dof_is_enabled(label: usize) -> bool {
                    match label {
                        #(#enabled_arms)*
                        _ => false,
                    }
                }
                /// The site of `label` (nothing outside the family): a `nop` with
                /// its note, each argument in its register.
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                fn site(label: usize, #(#args: #types),*) {
                    match label {
                        #(#arms)*
                        _ => {}
                    }
                }
            }
        }
    }
}

/// A probe's LTTng event: `lttng_enabled` and `event`, from the
/// `lttng_state!` and `lttng_event!` templates.
fn lttng_part(lttng_provider: &str, probe: &Probe, args: &[Ident]) -> TokenStream {
    let event = probe.lttng_event();
    let numbered = probe.labels.is_some();
    let types: Vec<TokenStream> = probe.args.iter().map(|a| rust_type(a.ty)).collect();
    let tracepoint = format!("lttng_ust_tracepoint_{lttng_provider}___{event}");
    let shim = format!("dtrace_lttng_{lttng_provider}_{event}");
    let mut fields = Vec::new();
    let mut values = Vec::new();
    if numbered {
        fields.push(quote!(label: i64));
        values.push(quote!(label: label as i64));
    }
    for (a, name) in probe.args.iter().zip(args) {
        let ty = c_field_type(a.ty);
        fields.push(quote!(#name: #ty));
        values.push(match a.ty {
            Type::String => quote!(#name: #name.as_ptr()),
            _ => quote!(#name),
        });
    }
    let label_param = if numbered { quote!(label: usize,) } else { quote!() };
    let doc = format!("Is an LTTng session recording `{lttng_provider}:{event}`? One load.");
    let event_doc = format!("Records `{lttng_provider}:{event}`.");
    quote! {
        /// The event's arguments as the C struct of its call site takes them.
        #[repr(C)]
        struct LttngArgs {
            #(#fields),*
        }
        unsafe extern "C" {
            #[link_name = #tracepoint]
            static LTTNG_TRACEPOINT: crate::lttng::Tracepoint;
            #[link_name = #shim]
            fn lttng_record(args: *const LttngArgs);
        }
        #[doc = #doc]
        #[inline(always)]
        pub(crate) fn lttng_enabled() -> bool {
            crate::probes::lttng_state!(LTTNG_TRACEPOINT)
        }
        #[doc = #event_doc]
        #[inline(never)]
        #[allow(clippy::too_many_arguments)]
        fn event(#label_param #(#args: #types),*) {
            let args = LttngArgs { #(#values),* };
            crate::probes::lttng_event!(lttng_record, &args);
        }
    }
}

/// `listened()`: the note names of the SDT probes and the
/// `provider:event` names of the LTTng events that listen now.
fn listened(c: &Catalogue) -> TokenStream {
    let mut checks = Vec::new();
    for probe in &c.provider.probes {
        let name = ident(&probe.name);
        let note = &probe.name;
        checks.push(match probe.labels {
            None => quote! { if #name::sdt_enabled() { on.push(#note.to_string()); } },
            Some(_) => {
                let fmt = format!("{note}{{l}}");
                quote! {
                    for l in #name::FIRST..=#name::LAST {
                        if #name::sdt_enabled(l) { on.push(format!(#fmt)); }
                    }
                }
            }
        });
    }
    for probe in c.provider.probes.iter().filter(|p| p.lttng.is_some()) {
        let name = ident(&probe.name);
        let event = format!("{}:{}", probe.lttng.as_deref().unwrap_or_default(), probe.lttng_event());
        checks.push(quote! { if #name::lttng_enabled() { on.push(#event.to_string()); } });
    }
    for ep in &c.events {
        let provider = ident(&ep.name);
        for e in &ep.probes {
            let name = ident(&e.name);
            let event = format!("{}:{}", ep.name, e.name);
            checks.push(quote! { if #provider::#name::lttng_enabled() { on.push(#event.to_string()); } });
        }
    }
    quote! {
        /// The names of the probes a tracer listens on now (SDT note names)
        /// and of the LTTng events a session records (`provider:event`).
        #[allow(dead_code, unknown_lints, clippy::suspicious_else_formatting, clippy::possible_missing_else)]
        pub(crate) fn listened() -> Vec<String> {
            let mut on = Vec::new();
            #(#checks)*
            on
        }
    }
}

/// For the unit tests: every SDT probe's note name and semaphore, and a
/// call of every probe with zeros and NULLs.
fn test_support(c: &Catalogue) -> TokenStream {
    let mut semaphores = Vec::new();
    let mut fires = Vec::new();
    for probe in &c.provider.probes {
        let name = ident(&probe.name);
        let note = &probe.name;
        let args: Vec<TokenStream> =
            probe.args.iter().map(|a| if a.ty == Type::String { quote!(Str::NULL) } else { quote!(0) }).collect();
        match probe.labels {
            None => {
                semaphores.push(quote! { all.push((#note.to_string(), &#name::SEMAPHORE)); });
                fires.push(quote! { #name::fire(#(#args),*); });
            }
            Some((first, last)) => {
                let fmt = format!("{note}{{}}");
                let (first, last, past) = (first as usize, last as usize, last as usize + 1);
                semaphores.push(quote! {
                    for (i, s) in #name::SEMAPHORES.iter().enumerate() {
                        all.push((format!(#fmt, #name::FIRST + i), s));
                    }
                });
                fires.push(quote! {
                    for l in [#first, #last, #past, usize::MAX] { #name::fire(l, #(#args),*); }
                });
            }
        }
    }
    for ep in &c.events {
        let provider = ident(&ep.name);
        for e in &ep.probes {
            let name = ident(&e.name);
            let args: Vec<TokenStream> =
                e.args.iter().map(|a| if a.ty == Type::String { quote!(Str::NULL) } else { quote!(0) }).collect();
            fires.push(quote! { #provider::#name::fire(#(#args),*); });
        }
    }
    quote! {
        /// Every SDT probe's note name and semaphore.
        #[cfg(all(test, dtrace_sdt))]
        pub(crate) fn semaphores() -> Vec<(String, &'static AtomicU16)> {
            let mut all = Vec::new();
            #(#semaphores)*
            all
        }
        /// Fires every probe and event once with zeros and NULLs, and each
        /// numbered family also with labels outside it.
        #[cfg(test)]
        pub(crate) fn fire_all_with_nulls() {
            #(#fires)*
        }
    }
}

/// The VM feed table as code, for `src/vm/mod.rs` (feeds.rs), and its
/// trace tags and targets, for `src/vm/event.rs` (trace_tags.rs).
fn feeds(c: &Catalogue) -> (Vec<TokenStream>, TokenStream) {
    // The trace tags, in order of first appearance (the most frequent first).
    let mut tags: Vec<&str> = Vec::new();
    for f in &c.feeds {
        for t in &f.tags {
            if !tags.contains(&t.as_str()) {
                tags.push(t);
            }
        }
    }
    let variant = |t: &str| {
        let camel: String = t
            .split('_')
            .map(|w| {
                let mut cs = w.chars();
                cs.next().map(|f| f.to_ascii_uppercase().to_string() + cs.as_str()).unwrap_or_default()
            })
            .collect();
        ident(&camel)
    };
    let variants: Vec<Ident> = tags.iter().map(|t| variant(t)).collect();
    let tag_names: Vec<&str> = tags.clone();
    let n_tags = tags.len();
    let target = |t: Target| match t {
        Target::Processes => quote!(Target::Processes),
        Target::Ports => quote!(Target::Ports),
        Target::SpawnMeta => quote!(Target::SpawnMeta),
        Target::Spans => quote!(Target::Spans),
        Target::NodeMonitor => quote!(Target::NodeMonitor),
        Target::SystemMonitor => quote!(Target::SystemMonitor),
        Target::ExitMeta => quote!(Target::ExitMeta),
    };
    // Is row i listening? One function per row.
    let row_fns: Vec<TokenStream> = c
        .feeds
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let sdt = f.sdt.iter().map(|p| {
                let p = ident(p);
                quote!(crate::probes::#p::enabled())
            });
            let lttng = f.lttng.iter().map(|e| {
                let (ep, _) = c.event(e).expect("checked by the parser");
                let (ep, e) = (ident(&ep.name), ident(e));
                quote!(crate::probes::#ep::#e::enabled())
            });
            let all: Vec<TokenStream> = sdt.chain(lttng).collect();
            let name = format_ident!("row{i}");
            let doc = format!(
                "Row {i} (on={}, tags={}, fmt={}): does one of its probes or events listen?",
                f.target.name(),
                f.tags.join(","),
                f.formatter
            );
            quote! {
                #[doc = #doc]
                #[inline(always)]
                fn #name() -> bool {
                    #(#all)||*
                }
            }
        })
        .collect();
    let row_listens: Vec<TokenStream> = (0..c.feeds.len())
        .map(|i| {
            let name = format_ident!("row{i}");
            quote!(#name())
        })
        .collect();
    // Per (target, tag): the rows it is in.
    let mut keys: Vec<(Target, &str)> = Vec::new();
    for f in &c.feeds {
        for t in &f.tags {
            if !keys.contains(&(f.target, t.as_str())) {
                keys.push((f.target, t));
            }
        }
    }
    let mut listens_arms = Vec::new();
    let mut dispatch_arms = Vec::new();
    for (t, tag) in &keys {
        let rows: Vec<usize> = c
            .feeds
            .iter()
            .enumerate()
            .filter(|(_, f)| f.target == *t && f.tags.iter().any(|x| x == tag))
            .map(|(i, _)| i)
            .collect();
        let (tt, tv) = (target(*t), variant(tag));
        let conds: Vec<&TokenStream> = rows.iter().map(|&i| &row_listens[i]).collect();
        listens_arms.push(quote! { (#tt, TraceTag::#tv) => #(#conds)||*, });
        let calls = rows.iter().map(|&i| {
            let cond = &row_listens[i];
            let fmt = ident(&c.feeds[i].formatter);
            quote! { if #cond { fmt::#fmt(event, tag); } }
        });
        dispatch_arms.push(quote! { (#tt, TraceTag::#tv) => { #(#calls)* } });
    }
    // Trace flags per target: all those automatic mode may set, and those
    // whose `auto` rows listen now.
    let mut flag_fns = Vec::new();
    for t in [Target::Processes, Target::Ports, Target::Spans] {
        let all = c.flags(t);
        let wanted = all.iter().map(|flag| {
            let rows: Vec<&TokenStream> = c
                .feeds
                .iter()
                .enumerate()
                .filter(|(_, f)| f.target == t && f.auto && f.flags.contains(flag))
                .map(|(i, _)| &row_listens[i])
                .collect();
            quote! { if #(#rows)||* { flags.push(#flag); } }
        });
        let tt = target(t);
        flag_fns.push(quote! { #tt => { #(#wanted)* } });
    }
    let all_procs = c.flags(Target::Processes);
    let all_ports = c.flags(Target::Ports);
    // The sources without trace flags (meta patterns, monitors): for each,
    // whether one of its rows listens, under the name dtrace_vm knows it by.
    let source_checks: Vec<TokenStream> = [
        (Target::SpawnMeta, "spawn"),
        (Target::NodeMonitor, "node_monitor"),
        (Target::SystemMonitor, "system_monitor"),
        (Target::ExitMeta, "exit_meta"),
    ]
    .iter()
    .map(|&(t, name)| {
        let rows: Vec<&TokenStream> =
            c.feeds.iter().enumerate().filter(|(_, f)| f.target == t).map(|(i, _)| &row_listens[i]).collect();
        if rows.is_empty() {
            quote! {}
        } else {
            quote! { if #(#rows)||* { sources.push(#name); } }
        }
    })
    .collect();
    let tag_types = quote! {
        /// What an erl_tracer event is about (the feed table's `on=`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Target {
            /// A process traced with trace flags.
            Processes,
            /// A port traced with trace flags.
            Ports,
            /// Meta tracing of the spawn BIFs (tracer state `spawn_meta`).
            SpawnMeta,
            /// A process in a span, traced by `dtrace:span/2` (tracer
            /// state `span`).
            Spans,
            /// `net_kernel:monitor_nodes/2`'s messages, passed on by
            /// `dtrace_vm` (`vm_monitor_event/4`).
            NodeMonitor,
            /// The system monitor's messages, passed on by `dtrace_vm`.
            SystemMonitor,
            /// Meta tracing of `erlang:exit/2` (tracer state `exit_meta`).
            ExitMeta,
        }

        /// The trace tags the feed table names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum TraceTag {
            #(#variants),*
        }

        /// Each trace tag's atom name, most frequent first (the order of
        /// the feed table): the load step makes the atoms in this order.
        pub(crate) const TRACE_TAGS: [(&str, TraceTag); #n_tags] = [#((#tag_names, TraceTag::#variants)),*];
    };
    let table = quote! {

        /// Is a tracer listening to a probe or event that an event of
        /// `target` with `tag` feeds? (erl_tracer's `enabled/3`.)
        pub(crate) fn listens(target: Target, tag: TraceTag) -> bool {
            match (target, tag) {
                #(#listens_arms)*
                #[allow(unreachable_patterns)]
                _ => false,
            }
        }

        /// Runs the formatting function of every row that `target` and
        /// `tag` are in and that has a listener. (erl_tracer's `trace/5`.)
        #[allow(unknown_lints, clippy::suspicious_else_formatting, clippy::possible_missing_else, clippy::collapsible_match)]
        pub(crate) fn dispatch(target: Target, tag: TraceTag, event: &Event<'_>) {
            match (target, tag) {
                #(#dispatch_arms)*
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }

        /// The trace flags of `target` that automatic mode (processes,
        /// ports) or `dtrace:span/2` (spans) sets now: those of the rows
        /// with a listener (not `auto=no`), each once, in the table's order.
        #[allow(unknown_lints, clippy::suspicious_else_formatting, clippy::possible_missing_else)]
        pub(crate) fn wanted_flags(target: Target) -> Vec<&'static str> {
            let mut flags: Vec<&'static str> = Vec::new();
            match target {
                #(#flag_fns)*
                Target::SpawnMeta | Target::NodeMonitor | Target::SystemMonitor | Target::ExitMeta => {}
            }
            flags
        }

        /// Every trace flag automatic mode may set on processes.
        pub(crate) const ALL_PROCESS_FLAGS: &[&str] = &[#(#all_procs),*];
        /// Every trace flag automatic mode may set on ports.
        pub(crate) const ALL_PORT_FLAGS: &[&str] = &[#(#all_ports),*];

        /// The sources without trace flags that a row with a listener
        /// wants now: `spawn` (the spawn BIFs' meta patterns, `spawn_meta`
        /// rows), `node_monitor`, `system_monitor`, `exit_meta`.
        #[allow(unknown_lints, clippy::suspicious_else_formatting, clippy::possible_missing_else)]
        pub(crate) fn sources_listening() -> Vec<&'static str> {
            let mut sources: Vec<&'static str> = Vec::new();
            #(#source_checks)*
            sources
        }
    };
    let mut items = row_fns;
    items.push(table);
    (items, tag_types)
}

/// The LTTng-UST sink, built when `<lttng/tracepoint.h>` (2.13 or later)
/// is there: the tracepoint headers of the `org_erlang_dtrace` events (the
/// probes under `#pragma dtrace_nif lttng`) and of the LTTng-only providers
/// (OTP's `org_erlang_dyntrace`), their call sites compiled into the NIF
/// (`lttng/shim.c`, a static library), and the provider package
/// `$OUT_DIR/libdtrace_lttng_tp.so` (`lttng/provider.c`, linked with
/// -llttng-ust), which native/build-nif.sh installs in priv/. C, so written
/// as text.
mod lttng {
    use std::fmt::Write as _;
    use std::fs;
    use std::path::Path;

    use dtrace_catalogue::{Catalogue, Probe, Type};

    fn c_type(ty: Type) -> &'static str {
        match ty {
            Type::String => "const char *",
            Type::I64 => "int64_t",
            Type::I32 => "int32_t",
            Type::U64 => "uint64_t",
            Type::U32 => "uint32_t",
        }
    }

    /// Builds the sink; `false` (with one warning) when it cannot be.
    pub fn build(c: &Catalogue, out: &Path) -> bool {
        println!("cargo:rerun-if-changed=lttng");
        println!("cargo:rerun-if-env-changed=DTRACE_NO_LTTNG");
        if std::env::var_os("CARGO_FEATURE_LTTNG").is_none() || std::env::var_os("DTRACE_NO_LTTNG").is_some() {
            return false;
        }
        let probe = out.join("lttng_probe.c");
        let check = "#include <lttng/tracepoint.h>\n#if !defined(LTTNG_UST_MAJOR_VERSION) || LTTNG_UST_MAJOR_VERSION != 2 \
                     || LTTNG_UST_MINOR_VERSION < 13\n#error lttng-ust 2.13 or later needed\n#endif\n";
        fs::write(&probe, check).expect("write lttng_probe.c");
        if cc::Build::new().file(&probe).cargo_metadata(false).cargo_warnings(false).try_expand().is_err() {
            println!(
                "cargo:warning=dtrace_nif: built without the LTTng sink: <lttng/tracepoint.h> (lttng-ust 2.13+) \
                 not found (Debian: apt-get install liblttng-ust-dev)"
            );
            return false;
        }
        let mut shim = String::from("/* @generated by build.rs from probes.d. Do not edit. */\n");
        let mut includes = String::from("/* @generated by build.rs from probes.d. Do not edit. */\n");
        // The user and file probes' events, then each LTTng-only provider.
        let dtrace_events: Vec<&Probe> = c.provider.probes.iter().filter(|q| q.lttng.is_some()).collect();
        let mut groups: Vec<(String, Vec<&Probe>)> = Vec::new();
        for p in dtrace_events {
            let provider = p.lttng.clone().unwrap_or_default();
            match groups.iter_mut().find(|(name, _)| *name == provider) {
                Some((_, v)) => v.push(p),
                None => groups.push((provider, vec![p])),
            }
        }
        for ep in &c.events {
            groups.push((ep.name.clone(), ep.probes.iter().collect()));
        }
        for (provider, events) in &groups {
            fs::write(out.join(format!("{provider}.h")), header(provider, events)).expect("write tracepoint header");
            let _ = writeln!(includes, "#include \"{provider}.h\"");
            for e in events {
                let event = e.lttng_event();
                let st = format!("dtrace_lttng_{provider}_{event}");
                let _ = writeln!(shim, "void {st}(const struct {st} *a)\n{{ tracepoint({provider}, {event}, a); }}");
            }
        }
        fs::write(out.join("dtrace_lttng_providers.h"), includes).expect("write dtrace_lttng_providers.h");
        fs::write(out.join("dtrace_lttng_shim.inc"), shim).expect("write dtrace_lttng_shim.inc");
        let objects = cc::Build::new()
            .file("lttng/provider.c")
            .include("lttng")
            .include(out)
            .pic(true)
            .cargo_metadata(false)
            .compile_intermediates();
        let so = out.join("libdtrace_lttng_tp.so");
        let mut link = cc::Build::new().cargo_metadata(false).get_compiler().to_command();
        link.arg("-shared")
            .arg("-Wl,-soname,libdtrace_lttng_tp.so")
            .arg("-Wl,--no-as-needed")
            .arg("-o")
            .arg(&so)
            .args(&objects)
            .arg("-llttng-ust");
        if !link.status().is_ok_and(|s| s.success()) {
            println!(
                "cargo:warning=dtrace_nif: built without the LTTng sink: linking the provider with -llttng-ust failed"
            );
            return false;
        }
        cc::Build::new()
            .file("lttng/shim.c")
            .include("lttng")
            .include(out)
            .flag("-fvisibility=hidden")
            .define("LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION", None)
            .compile("dtrace_lttng_shim");
        // dlopen, for glibc before 2.34.
        println!("cargo:rustc-link-lib=dylib=dl");
        println!("cargo:rustc-cfg=dtrace_lttng");
        true
    }

    /// The tracepoint header of one provider: an argument struct and a
    /// `TRACEPOINT_EVENT` per event, fields in the declared order.
    fn header(provider: &str, events: &[&Probe]) -> String {
        let mut structs = String::new();
        let mut defs = String::new();
        for e in events {
            let event = e.lttng_event();
            let st = format!("dtrace_lttng_{provider}_{event}");
            let mut members = Vec::new();
            let mut fields = Vec::new();
            for (name, ty) in e.lttng_fields() {
                members.push(format!("    {} {name};", c_type(ty)));
                fields.push(match ty {
                    Type::String => format!("ctf_string({name}, a->{name})"),
                    ty => format!("ctf_integer({}, {name}, a->{name})", c_type(ty)),
                });
            }
            let _ = writeln!(structs, "/* {} */\nstruct {st} {{\n{}\n}};\n", e.doc, members.join("\n"));
            let _ = writeln!(
                defs,
                "TRACEPOINT_EVENT({provider}, {event},\n    TP_ARGS(const struct {st} *, a),\n    TP_FIELDS(\n        {}))\n",
                fields.join("\n        ")
            );
        }
        let guard = provider.to_uppercase();
        format!(
            "/* @generated by build.rs from probes.d. Do not edit.\n * The LTTng-UST events of provider {provider}. */\n\
             #undef TRACEPOINT_PROVIDER\n#define TRACEPOINT_PROVIDER {provider}\n\
             #undef TRACEPOINT_INCLUDE\n#define TRACEPOINT_INCLUDE \"{provider}.h\"\n\n\
             #ifndef DTRACE_{guard}_ARGS\n#define DTRACE_{guard}_ARGS\n#include <stdint.h>\n\n{structs}#endif\n\n\
             #if !defined(DTRACE_{guard}_H) || defined(TRACEPOINT_HEADER_MULTI_READ)\n\
             #define DTRACE_{guard}_H\n\n#include <lttng/tracepoint.h>\n\n{defs}\
             #endif\n\n#include <lttng/tracepoint-event.h>\n"
        )
    }
}
