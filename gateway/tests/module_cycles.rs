//! The gateway's modules form no dependency cycle (issue 14): a layering a reader can
//! walk from `wire` up to `worker`, where every module is understood from the ones below it.
//!
//! The test reads `gateway/src` and lists one edge per reference from a module file to
//! another: `use crate::…`, `use super::…`, `use self::…` and the same paths written inline,
//! and a parent's `child::…` paths. A path through a parent's re-export (`crate::wire::MacAddr`,
//! re-exported from `wire::ethernet`) is an edge to the module that defines it; a parent's own
//! `pub use` re-exports and `mod` declarations are structure, not edges. Test code is not read
//! (a `tests` module, `#[cfg(test)]` to the end of the file, `tests.rs` and `tests/`).
//! Comments are skipped. Then it looks for strongly connected components (Tarjan).
//!
//! The test fails on any cycle not listed in [`KNOWN`] (empty: the gateway has none), and on
//! a listed one that is gone (delete it from the list). To see the edges:
//! `cargo test -p torii-gateway --no-default-features --test module_cycles -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles (strongly connected components, sorted module paths joined by `, `) the gateway is
/// allowed to keep: none. The pipeline's one component (all of `pipeline/`: `pipeline` ↔
/// `arp`, `ipv4`, `ipv6`, `link`; `burst` ↔ `family`, `ipv4`, `ipv6`, `state`; `family` ↔
/// `fragment`; `state` ↔ `fragment`, `resolve`) was broken (issue 14) by moving the shared
/// frame types to the leaf `pipeline::frame`, `burst`'s hint types and `ports` to the leaf
/// `pipeline::hint`, and the fragment and resolution entries into `pipeline::state`. A cycle
/// accepted for a while goes here, with the reason, until it is broken.
const KNOWN: &[&str] = &[];

/// A module path relative to the crate root: `[]` is `lib.rs`, `["pipeline", "burst"]` is
/// `pipeline/burst.rs`.
type Module = Vec<String>;

struct Source {
    module: Module,
    /// The text that counts: no comments, no test code.
    text: String,
    /// Declared child modules (`mod x;`).
    children: BTreeSet<String>,
    /// Names a `pub use child::…` re-exports, and the child each comes from.
    reexports: BTreeMap<String, String>,
}

/// `src` of the crate in `dir` (relative to the workspace root).
fn src_of(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir).join("src")
}

fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                collect(&path, root, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && name != "main.rs" {
            let rel = path.strip_prefix(root).unwrap();
            out.push(parse(module_of(rel), &std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The file's code without comments and without its test module.
fn code(raw: &str) -> String {
    let mut out = String::new();
    let mut lines = raw.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
            if next.starts_with("mod tests") || next.starts_with("pub(crate) mod test") || next.starts_with("mod test")
            {
                break;
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            // A trailing comment; `//` inside a string literal is rare enough in this code.
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The `use` statements of `text` (from `use` to `;`), with their visibility.
fn uses(text: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = find_word(rest, "use") {
        let before = rest[..i].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let Some(end) = rest[i..].find(';') else { break };
        out.push((public, rest[i + 3..i + end].split_whitespace().collect::<Vec<_>>().join(" ")));
        rest = &rest[i + end..];
    }
    out
}

/// The byte index of `word` in `s` as a whole word.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(word) {
        let at = from + i;
        let ok_before = at == 0 || !is_ident(s.as_bytes()[at - 1]);
        let ok_after = s.as_bytes().get(at + word.len()).is_none_or(|&b| !is_ident(b));
        if ok_before && ok_after {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `a::{b::{c, d}, e}` → `a::b::c`, `a::b::d`, `a::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        // `a::b as c` is a path to `a::b`.
        return vec![tree.split(" as ").next().unwrap_or(tree).replace(' ', "")];
    };
    let prefix = tree[..open].replace(' ', "");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.extend(expand(&format!("{prefix}{}", &inner[start..i])));
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        out.extend(expand(&format!("{prefix}{}", &inner[start..])));
    }
    out
}

fn parse(module: Module, raw: &str) -> Source {
    let text = code(raw);
    let mut children = BTreeSet::new();
    for line in text.lines() {
        let t = line.trim();
        let t = t.strip_prefix("pub ").or_else(|| t.strip_prefix("pub(crate) ")).unwrap_or(t);
        if let Some(name) = t.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            children.insert(name.trim().to_owned());
        }
    }
    let mut reexports = BTreeMap::new();
    for (public, tree) in uses(&text) {
        if !public {
            continue;
        }
        for path in expand(&tree) {
            let path = path.strip_prefix("self::").unwrap_or(&path);
            let segs: Vec<&str> = path.split("::").collect();
            if segs.len() >= 2 && children.contains(segs[0]) {
                reexports.insert(segs[segs.len() - 1].to_owned(), segs[0].to_owned());
            }
        }
    }
    Source { module, text, children, reexports }
}

/// Every path in `text` that starts at `crate`, `super` or `self`, or at a child module.
fn paths(src: &Source) -> Vec<String> {
    let mut out = Vec::new();
    for (public, tree) in uses(&src.text) {
        for p in expand(&tree) {
            let first = p.split("::").next().unwrap_or("");
            // A parent's re-export of its own child is structure, not a dependency.
            if public && (src.children.contains(first) || first == "self") {
                continue;
            }
            out.push(p);
        }
    }
    // Inline paths (outside `use`): scan for `crate::`, `super::`, `self::`, `child::`.
    let without_uses = {
        let mut s = src.text.clone();
        while let Some(i) = find_word(&s, "use") {
            let end = s[i..].find(';').map_or(s.len(), |e| i + e + 1);
            s.replace_range(i..end, "");
        }
        s
    };
    let bytes = without_uses.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            let start = i;
            while i < bytes.len() && (is_ident(bytes[i]) || bytes[i] == b':') {
                i += 1;
            }
            let p = &without_uses[start..i];
            let first = p.split("::").next().unwrap_or("");
            if p.contains("::") && (matches!(first, "crate" | "super" | "self") || src.children.contains(first)) {
                out.push(p.trim_end_matches(':').to_owned());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The module file a path from `from` refers to, if it is one of `known`.
fn resolve(from: &Source, path: &str, sources: &BTreeMap<Module, &Source>) -> Option<Module> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Module = match *segs.first()? {
        "crate" => {
            segs.remove(0);
            Vec::new()
        }
        "self" => {
            segs.remove(0);
            from.module.clone()
        }
        "super" => {
            let mut m = from.module.clone();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                m.pop();
            }
            m
        }
        _ => from.module.clone(),
    };
    // Descend while the next segment is a module file.
    for seg in segs {
        let mut next = base.clone();
        next.push(seg.to_owned());
        if sources.contains_key(&next) {
            base = next;
            continue;
        }
        // An item: re-exported from a child?
        if let Some(child) = sources.get(&base).and_then(|s| s.reexports.get(seg)) {
            base.push(child.clone());
        }
        break;
    }
    sources.contains_key(&base).then_some(base)
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Module) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.graph[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                scc.push(name(w));
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

fn graph(root: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut all = Vec::new();
    collect(root, root, &mut all);
    let sources: BTreeMap<Module, &Source> = all.iter().map(|s| (s.module.clone(), s)).collect();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for src in &all {
        let edges = graph.entry(src.module.clone()).or_default();
        for p in paths(src) {
            if let Some(to) = resolve(src, &p, &sources) {
                // The crate root only declares modules; a module's parent is where it lives.
                if to != src.module && !to.is_empty() {
                    edges.insert(to);
                }
            }
        }
    }
    graph
}

/// Prints `crate`'s edges and fails on a cycle not in `known`, or on one of `known` that is gone.
fn check(krate: &str, known: &[&str]) {
    let graph = graph(&src_of(krate));
    for (from, to) in &graph {
        for t in to {
            println!("{krate}: {} -> {}", name(from), name(t));
        }
    }
    let found: Vec<String> = cycles(&graph).into_iter().map(|c| c.join(", ")).collect();
    let new: Vec<&String> = found.iter().filter(|c| !known.contains(&c.as_str())).collect();
    let gone: Vec<&&str> = known.iter().filter(|k| !found.iter().any(|c| c == **k)).collect();
    assert!(new.is_empty(), "{krate}: module cycles (strongly connected components): {new:#?}");
    assert!(gone.is_empty(), "{krate}: cycles listed as known that are gone (remove them): {gone:#?}");
}

#[test]
fn gateway_modules_form_no_cycle() {
    check("gateway", KNOWN);
}

#[test]
fn table_modules_form_no_cycle() {
    check("table", &[]);
}

#[test]
fn brace_trees_expand() {
    assert_eq!(expand("a::{b::{c, d}, e}"), ["a::b::c", "a::b::d", "a::e"]);
    assert_eq!(expand("a::{b as c, d::{self, e}}"), ["a::b", "a::d::self", "a::d::e"]);
    assert_eq!(expand("super::x"), ["super::x"]);
}
