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
//!   `libdtrace_lttng_tp.so` (build/lttng.rs).
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

use dtrace_catalogue::{Arch, Catalogue, Type};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

#[path = "build/feeds.rs"]
mod feeds;
#[path = "build/lttng.rs"]
mod lttng;
#[path = "build/probes.rs"]
mod probes;

use feeds::feeds;
use probes::probes;

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
            /// The provider's name (the same as `probes::PROVIDER`).
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
