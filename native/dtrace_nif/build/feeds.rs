//! The VM feed table as code (`$OUT_DIR/feeds.rs`, `$OUT_DIR/trace_tags.rs`).

use dtrace_catalogue::{Catalogue, Target};
use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

use super::*;

/// The VM feed table as code, for `src/vm/mod.rs` (feeds.rs), and its
/// trace tags and targets, for `src/vm/event.rs` (trace_tags.rs).
pub(super) fn feeds(c: &Catalogue) -> (Vec<TokenStream>, TokenStream) {
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
