//! The probes' modules (`$OUT_DIR/probes.rs`): sites, semaphores, LTTng
//! events, `listened()` and the unit tests' support.

use dtrace_catalogue::{Arch, Catalogue, Probe, Provider, Type};
use proc_macro2::{Ident, Literal, TokenStream};
use quote::quote;

use super::*;

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
pub(super) fn probes(c: &Catalogue, backend: Backend) -> Vec<TokenStream> {
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
    let site = arch.site_asm();
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
                /// The site: its no-op instructions with their note, each argument in its register.
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                fn site(#(#args: #types),*) {
                    crate::probes::sdt_site!(#site, #provider_name, #note, "{semaphore}", #note_args, #index,
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
                    #label => crate::probes::sdt_site!(#site, #provider_name, #note, #sem, #note_args, #index,
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
                /// The site of `label` (nothing outside the family): its no-op
                /// instructions with their note, each argument in its register.
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
