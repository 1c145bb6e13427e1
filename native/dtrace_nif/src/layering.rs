//! The crate's modules depend on each other one way: this test reads the
//! sources (and the code `build.rs` writes, which they `include!`), builds
//! the graph of module references (`crate::a`, `super::a`, `self::a`, a
//! declared child `a::`), and fails on any circle (a strongly connected
//! component of more than one module), naming each reference in it.
//!
//! How the circles of issue #40 were broken, for the next one: a part that
//! every family needs registers into a leaf rather than being called by
//! name (load.rs); a shared type goes down into a module of its own
//! (term.rs, vm/event.rs); generated code that two modules read is
//! generated apart (trace_tags.rs, dof_probes.rs's `PROVIDER`).
//!
//! Test code (`#[cfg(test)]` items) is left out: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path, `a::b` (the crate root is `""`).
type Module = String;

/// Edges: from module, to module, with one place (file:line) as evidence.
type Edges = BTreeMap<(Module, Module), String>;

/// Every `.rs` file under `dir`, with its module path.
fn modules(src: &Path) -> Vec<(Module, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).expect("src readable");
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
                out.push((module_of(src, &path), path));
            }
        }
    }
    out.sort();
    out
}

/// `lib.rs` is the root, `a/mod.rs` is `a`, `a/b.rs` is `a::b`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().map(|s| s.as_str()) == Some("mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        parts.clear();
    }
    parts.join("::")
}

/// The file's text with the build script's outputs it includes appended,
/// `//` comments dropped, and ` :: ` (generated code) written `::`.
fn text_of(file: &Path, out_dir: Option<&Path>) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("source readable");
    let mut lines: Vec<String> = text.lines().map(clean).collect();
    for line in text.lines() {
        let marker = "include!(concat!(env!(\"OUT_DIR\"), \"/";
        if let Some(at) = line.find(marker) {
            let rest = &line[at + marker.len()..];
            if let (Some(end), Some(dir)) = (rest.find('"'), out_dir) {
                let generated = std::fs::read_to_string(dir.join(&rest[..end])).expect("generated file readable");
                lines.extend(generated.lines().map(clean));
            }
        }
    }
    lines
}

/// A line without its `//` comment (outside string literals), with
/// `a :: b` written `a::b`.
fn clean(line: &str) -> String {
    let bytes = line.as_bytes();
    let (mut in_str, mut i, mut end) = (false, 0, bytes.len());
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'/' if !in_str && bytes.get(i + 1) == Some(&b'/') => {
                end = i;
                break;
            }
            _ => {}
        }
        i += 1;
    }
    line[..end].replace(" :: ", "::").replace(":: ", "::").replace(" ::", "::")
}

/// The lines outside `#[cfg(test)]` items (the attribute, then the item up
/// to its closing brace or semicolon).
fn without_tests(lines: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skipping = false;
    let mut depth: i64 = 0;
    let mut opened = false;
    for (n, line) in lines.iter().enumerate() {
        let t = line.trim();
        if !skipping && (t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test")) {
            skipping = true;
            depth = 0;
            opened = false;
            continue;
        }
        if skipping {
            for c in t.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            let attribute = t.starts_with("#[");
            if !attribute && ((opened && depth <= 0) || (!opened && t.ends_with(';'))) {
                skipping = false;
            }
            continue;
        }
        out.push((n + 1, line.clone()));
    }
    out
}

/// The identifier path starting at `s` (`a::b::c`), and the `{...}` group
/// after it if any.
fn path_at(s: &str) -> (Vec<String>, Option<String>) {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if len == 0 {
            if let Some(group) = rest.strip_prefix('{') {
                return (segs, Some(group.to_string()));
            }
            return (segs, None);
        }
        segs.push(rest[..len].to_string());
        match rest[len..].strip_prefix("::") {
            Some(r) => rest = r,
            None => return (segs, None),
        }
    }
}

/// The top-level items of a `{a, b::{c, d}, e}` group (text after `{`).
fn group_items(group: &str) -> Vec<String> {
    let (mut items, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in group.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' if depth == 0 => break,
            '}' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => items.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    items.push(cur);
    items.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// The module paths (absolute, as segments) a line refers to, from module
/// `me` whose declared children are `children`.
fn references(line: &str, me: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < line.len() {
        // (A byte inside a UTF-8 character starts no path.)
        let boundary = line.is_char_boundary(i)
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':'));
        if !boundary {
            i += 1;
            continue;
        }
        let rest = &line[i..];
        let (base, after): (Vec<String>, &str) = if let Some(r) = rest.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if let Some(r) = rest.strip_prefix("$crate::") {
            (Vec::new(), r)
        } else if rest.starts_with("super::") {
            let mut base = me.to_vec();
            let mut r = rest;
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                r = next;
            }
            (base, r)
        } else if let Some(r) = rest.strip_prefix("self::") {
            (me.to_vec(), r)
        } else {
            let (segs, _) = path_at(rest);
            match segs.first() {
                Some(first) if segs.len() > 1 && children.contains(first) => (me.to_vec(), rest),
                _ => {
                    i += 1;
                    continue;
                }
            }
        };
        let (segs, group) = path_at(after);
        let mut prefix = base.clone();
        prefix.extend(segs);
        match group {
            Some(g) => {
                for item in group_items(&g) {
                    let (sub, _) = path_at(&item);
                    let mut p = prefix.clone();
                    p.extend(sub);
                    out.push(p);
                }
            }
            None => out.push(prefix),
        }
        i += 1;
    }
    out
}

/// The graph of the crate under `src`, with `out_dir` for the included
/// generated code.
fn graph(src: &Path, out_dir: Option<&Path>) -> Edges {
    let mods = modules(src);
    let known: BTreeSet<Module> = mods.iter().map(|(m, _)| m.clone()).collect();
    let mut edges = Edges::new();
    for (module, file) in &mods {
        let me: Vec<String> =
            if module.is_empty() { Vec::new() } else { module.split("::").map(String::from).collect() };
        let lines = without_tests(&text_of(file, out_dir));
        let children: BTreeSet<String> = lines
            .iter()
            .filter_map(|(_, l)| {
                let t = l.trim();
                let t = t.strip_prefix("pub(crate) ").or_else(|| t.strip_prefix("pub ")).unwrap_or(t);
                t.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')).map(|s| s.trim().to_string())
            })
            .collect();
        // Inline modules (`mod fmt { ... }`): `super::` inside resolves
        // against them. Their depth of braces at the opening line.
        let mut inline: Vec<(String, i64)> = Vec::new();
        let mut depth: i64 = 0;
        for (n, line) in &lines {
            let t = line.trim();
            let t = ["pub(crate) ", "pub(super) ", "pub "].iter().fold(t, |t, p| t.strip_prefix(p).unwrap_or(t));
            if let Some(r) = t.strip_prefix("mod ") {
                if let Some(name) = r.strip_suffix('{').map(|n| n.trim()) {
                    inline.push((name.to_string(), depth));
                }
            }
            let mut here = me.clone();
            here.extend(inline.iter().map(|(name, _)| name.clone()));
            let refs = references(line, &here, &children);
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            while inline.last().is_some_and(|(_, d)| depth <= *d) {
                inline.pop();
            }
            for path in refs {
                // The longest known module that the path starts with.
                let mut target = None;
                for len in (1..=path.len()).rev() {
                    let cand = path[..len].join("::");
                    if known.contains(&cand) {
                        target = Some(cand);
                        break;
                    }
                }
                if let Some(t) = target {
                    if &t != module && !t.is_empty() {
                        let at = format!("{}:{}", file.display(), n);
                        edges.entry((module.clone(), t)).or_insert(at);
                    }
                }
            }
        }
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(edges: &Edges) -> Vec<BTreeSet<Module>> {
    let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        adj.entry(a.as_str()).or_default().push(b.as_str());
        adj.entry(b.as_str()).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<BTreeSet<Module>>,
    }
    fn visit<'a>(v: &'a str, adj: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for &w in &adj[v] {
            if !s.index.contains_key(w) {
                visit(w, adj, s);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for &v in adj.keys() {
        if !s.index.contains_key(v) {
            visit(v, &adj, &mut s);
        }
    }
    s.out
}

/// The circles of `edges`, each with the edges inside it.
fn circles(edges: &Edges) -> Vec<String> {
    cycles(edges)
        .into_iter()
        .map(|comp| {
            let inside: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| comp.contains(a) && comp.contains(b))
                .map(|((a, b), at)| format!("  {a} -> {b} ({at})"))
                .collect();
            format!("{:?}:\n{}", comp, inside.join("\n"))
        })
        .collect()
}

#[test]
fn no_module_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src, Some(Path::new(env!("OUT_DIR"))));
    // A parser that sees nothing cannot pass: the crate has many edges,
    // and these among them.
    assert!(edges.len() > 40, "only {} edges found", edges.len());
    for (a, b) in
        [("vm::ports", "vm::event"), ("efile", "nif"), ("probes", "dof"), ("dof", "dof::helper"), ("text", "term")]
    {
        assert!(edges.contains_key(&(a.to_string(), b.to_string())), "edge {a} -> {b} not found");
    }
    let found = circles(&edges);
    assert!(found.is_empty(), "module circles (src/layering.rs says how to break one):\n{}", found.join("\n"));
}

#[test]
fn a_planted_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("dtrace-layering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::f;\n#[cfg(test)]\nmod tests {\n    use crate::b::g;\n}\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::{a::{x, y}, c};\n// use crate::zzz;\n").unwrap();
    let edges = graph(&dir, None);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert_eq!(circles(&edges).len(), 1);
}
