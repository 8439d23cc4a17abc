//! The layout rules of every crate of the workspace, checked so they stay true:
//! - no import circle among a crate's files (a folder's `mod.rs` and its parts aside: the parts use the parent's
//!   types). An import is any path that names another module: `use crate::..`, `use super::..`, `use self::..`,
//!   a bare path through a child module the file declares (`mod accounting;` then `accounting::x`), and an
//!   inline `crate::..`; a path through a re-export (`pub use accounting::at_or_after` in `device/mod.rs`) is
//!   followed to the module that defines the item;
//! - no arrow up a layer: each crate's modules are ranked below (lowest first), and a module may name only
//!   modules of its own layer or lower ones;
//! - no source file over 600 lines: Rust, and the device code (`.cu`, `.h`, `.cpp`, `.wgsl`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LINE_LIMIT: usize = 600;

/// A crate's layers, lowest first: each a list of module paths (a module is in the layer of its longest listed
/// prefix; `x` covers `x::y`). A module in no layer is an error, so a new module is placed on purpose.
type Layers = &'static [&'static [&'static str]];

/// The crates whose modules are checked: (source root, crate root file, layers).
const CRATES: &[(&str, &str, Layers)] = &[
    (
        "device/src",
        "lib.rs",
        &[
            // vocabulary: layouts, codes, messages, errors, the run-time helpers everything uses
            &[
                "ffi",
                "c_layout",
                "layout",
                "codes",
                "ring",
                "clock",
                "spin_lock",
                "sync",
                "busy_cores",
                "thread_slice",
                "cpu_placement",
                "wait",
                "event",
                "message",
                "error",
            ],
            // where the simulator may interleave the threads it runs (shared.rs's accesses go through it)
            &["interleave"],
            // the shared regions and the behaviours compiled into them
            &["shared", "bulk", "behaviour"],
            // the executors of the device code
            &["backend"],
            // the host side of a device; the simulator, which runs the device code and the host's layer
            &["device", "sim"],
        ],
    ),
    (
        "supervisor/src",
        "lib.rs",
        &[
            // vocabulary
            &["sync", "rounded", "reason", "policy", "status", "tree_events", "intensity", "dead_letter"],
            &["error"],
            // answers as bytes, to cross a process
            &["wire"],
            // the devices' slots and the notices from them
            &["slots"],
            // what the user holds, what the tree shares
            &["handle"],
            &["registry"],
            &["services"],
            // what the user declares
            &["child", "spec", "validate", "config"],
            // a GPU child's lifecycle (and its mirror, for a mirrored one), then OTP's decisions
            &["gpu", "mirror"],
            &["supervisor"],
        ],
    ),
    ("src", "lib.rs", &[&["faults"], &["runtime"], &["cluster"], &["app"]]),
    (
        "bench/src",
        "main.rs",
        &[
            &["stats", "heap", "runtime", "floor"],
            &["backends", "liveness", "remote"],
            &["scenarios"],
            &["contention", "cuda"],
        ],
    ),
    ("build-support/src", "lib.rs", &[]),
    ("examples/moving-average/src", "lib.rs", &[]),
    ("examples/rate_limiter/src", "lib.rs", &[]),
];

/// One module: its source text and the child modules it declares.
struct Module {
    text: String,
    children: BTreeSet<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// The text without comments (docs mention paths they do not import) and without string literals' contents.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .map(|l| {
            // drop the insides of "..." so a path in a message is not an import
            let mut out = String::new();
            let mut quoted = false;
            for c in l.chars() {
                if c == '"' {
                    quoted = !quoted;
                }
                if !quoted {
                    out.push(c);
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The child modules `text` declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`, with attributes before).
fn declared_children(text: &str) -> BTreeSet<String> {
    code(text)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.rsplit_once(']').map_or(l, |(_, rest)| rest).trim();
            let rest = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub ")).unwrap_or(l);
            let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// Every module of the crate under `src` by path (`device::accounting`; the crate root is `""`).
fn modules(src: &Path, crate_root: &str) -> BTreeMap<String, Module> {
    rust_files(src)
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts.len() == 1 && format!("{}.rs", parts[0]) != crate_root && ["main", "lib"].contains(&&*parts[0]) {
                return None; // a second crate root (a binary beside a library) is its own crate
            }
            if parts.len() == 1 && format!("{}.rs", parts[0]) == crate_root {
                parts.clear();
            }
            let text = std::fs::read_to_string(&path).expect("readable");
            Some((parts.join("::"), Module { children: declared_children(&text), text }))
        })
        .collect()
}

/// `a::{b, c::{d as e}}` -> `a::b`, `a::c::d as e`.
fn expand(prefix: &str, body: &str, out: &mut Vec<String>) {
    let (mut depth, mut item) = (0, String::new());
    let mut items = Vec::new();
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut item));
        } else {
            item.push(ch);
        }
    }
    items.push(item);
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        match item.split_once('{') {
            Some((head, rest)) => expand(&format!("{prefix}{head}"), rest.rsplit_once('}').map_or(rest, |r| r.0), out),
            None => out.push(format!("{prefix}{item}")),
        }
    }
}

/// `module`'s path joined with a relative path: `super::` climbs, `self::` stays.
fn relative(module: &str, path: &str) -> String {
    let mut base: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
    let mut rest = path;
    loop {
        if let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        } else if let Some(r) = rest.strip_prefix("self::") {
            rest = r;
        } else {
            break;
        }
    }
    base.push(rest);
    base.join("::")
}

/// The items a `use` statement names (`stmt`: what follows `use `) that are in this crate: each as its
/// crate-absolute path and the name it is known by here (its last segment, or its `as` alias).
fn use_items(module: &str, children: &BTreeSet<String>, stmt: &str) -> Vec<(String, String)> {
    let mut items = Vec::new();
    expand("", stmt.trim(), &mut items);
    let mut out = Vec::new();
    for item in items {
        let (path, alias) = item.split_once(" as ").map_or((item.as_str(), None), |(p, a)| (p, Some(a.trim())));
        let path = path.replace(char::is_whitespace, "");
        let first = path.split("::").next().unwrap_or("");
        let absolute = match path.strip_prefix("crate::") {
            Some(rest) => rest.to_string(),
            None if first == "super" || first == "self" || children.contains(first) => relative(module, &path),
            None => continue, // another crate's
        };
        let name = alias.unwrap_or_else(|| absolute.rsplit("::").next().unwrap_or(&absolute)).to_string();
        out.push((absolute, name));
    }
    out
}

/// The crate-absolute paths module `module` names: its `use` statements, inline `crate::`/`super::`/`self::`
/// paths, and inline paths through its own child modules.
fn used_paths(module: &str, m: &Module) -> Vec<String> {
    let mut text = code(&m.text);
    let mut out = Vec::new();
    while let Some(at) = text
        .match_indices("use ")
        .map(|(at, _)| at)
        .find(|&at| at == 0 || !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
    {
        let end = at + text[at..].find(';').unwrap_or(text.len() - at);
        out.extend(use_items(module, &m.children, &text[at + 4..end]).into_iter().map(|(path, _)| path));
        text.replace_range(at..end, ""); // its paths are read: the scan below sees the rest
    }
    for token in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
        let path = token.trim_matches(':');
        let first = path.split("::").next().unwrap_or("");
        if !path.contains("::") {
            continue;
        }
        if let Some(rest) = path.strip_prefix("crate::") {
            out.push(rest.to_string());
        } else if first == "super" || first == "self" || m.children.contains(first) {
            out.push(relative(module, path));
        }
    }
    out
}

/// What `module` re-exports: item name -> the crate-absolute path it stands for.
fn re_exports(module: &str, m: &Module) -> BTreeMap<String, String> {
    let text = code(&m.text);
    let mut out = BTreeMap::new();
    for keyword in ["pub use ", "pub(crate) use ", "pub(super) use "] {
        for (at, _) in text.match_indices(keyword) {
            let rest = &text[at + keyword.len()..];
            let stmt = &rest[..rest.find(';').unwrap_or(rest.len())];
            out.extend(use_items(module, &m.children, stmt).into_iter().map(|(path, name)| (name, path)));
        }
    }
    out
}

/// The module a crate-absolute `path` names (following re-exports), if any.
fn resolve(
    path: &str,
    modules: &BTreeMap<String, Module>,
    exports: &BTreeMap<String, BTreeMap<String, String>>,
    depth: usize,
) -> Option<String> {
    let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let n = (0..=parts.len()).rev().find(|&n| modules.contains_key(&parts[..n].join("::")))?;
    let module = parts[..n].join("::");
    if let (Some(item), true) = (parts.get(n), depth < 8) {
        if let Some(target) = exports.get(&module).and_then(|e| e.get(*item)) {
            let rest = parts[n + 1..].join("::");
            let followed = if rest.is_empty() { target.clone() } else { format!("{target}::{rest}") };
            return resolve(&followed, modules, exports, depth + 1).or(Some(module));
        }
    }
    Some(module)
}

/// Module -> the modules it names, siblings and cousins only (not its own ancestors, not the crate root).
fn import_graph(modules: &BTreeMap<String, Module>) -> BTreeMap<String, BTreeSet<String>> {
    let exports: BTreeMap<String, BTreeMap<String, String>> =
        modules.iter().map(|(name, m)| (name.clone(), re_exports(name, m))).collect();
    modules
        .iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, m)| {
            let deps = used_paths(name, m)
                .iter()
                .filter_map(|p| resolve(p, modules, &exports, 0))
                .filter(|d| !d.is_empty() && d != name && !name.starts_with(&format!("{d}::")))
                .collect();
            (name.clone(), deps)
        })
        .collect()
}

/// One circle in `graph`, if there is any.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// The layer of `module` (its longest listed prefix), if it has one.
fn layer_of(module: &str, layers: Layers) -> Option<usize> {
    let covers = |prefix: &str| module == prefix || module.starts_with(&format!("{prefix}::"));
    layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().filter(|n| covers(n)).map(move |n| (n.len(), i)))
        .max()
        .map(|(_, i)| i)
}

/// Every arrow of `graph` that runs up a layer, and every module in no layer.
fn layer_violations(graph: &BTreeMap<String, BTreeSet<String>>, layers: Layers) -> Vec<String> {
    if layers.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (from, deps) in graph {
        let Some(mine) = layer_of(from, layers) else {
            out.push(format!("`{from}` is in no layer"));
            continue;
        };
        for to in deps {
            if let Some(theirs) = layer_of(to, layers).filter(|&l| l > mine) {
                out.push(format!("`{from}` (layer {mine}) names `{to}` (layer {theirs}): an arrow up a layer"));
            }
        }
    }
    out
}

/// Every source file of the repository: Rust and device code, the build output and vendored code aside.
fn source_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("folder") {
            let path = entry.expect("entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_dir() {
                if !(name.starts_with('.') || name == "target") {
                    stack.push(path);
                }
            } else if ["rs", "cu", "h", "cpp", "inc", "wgsl"].iter().any(|e| name.ends_with(&format!(".{e}"))) {
                out.push(path);
            }
        }
    }
    out
}

/// The files of `files` over the line limit, as `path: N lines`.
fn over_limit(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .map(|(path, text)| (path, text.lines().count()))
        .filter(|(_, lines)| *lines > LINE_LIMIT)
        .map(|(path, lines)| format!("{path}: {lines} lines"))
        .collect()
}

#[test]
fn no_import_circle_and_no_arrow_up_a_layer_in_any_crate() {
    let mut problems = Vec::new();
    for (src, crate_root, layers) in CRATES {
        let modules = modules(&root().join(src), crate_root);
        assert!(modules.contains_key(""), "{src}: no crate root {crate_root}");
        let graph = import_graph(&modules);
        if *src == "device/src" {
            // the parser sees what the planted tests plant: a bare path from a mod.rs to its part, a re-export
            assert!(graph["device"].contains("device::accounting"), "{:?}", graph["device"]);
        }
        if let Some(circle) = find_circle(&graph) {
            problems.push(format!("{src}: import circle {}", circle.join(" -> ")));
        }
        problems.extend(layer_violations(&graph, layers).into_iter().map(|v| format!("{src}: {v}")));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_source_file_is_over_600_lines() {
    let files: Vec<(String, String)> = source_files()
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable");
            (p.strip_prefix(root()).expect("under the root").display().to_string(), text)
        })
        .collect();
    assert!(files.iter().any(|(p, _)| p.ends_with("block0.wgsl")), "the walk missed the device code");
    assert!(files.iter().any(|(p, _)| p.starts_with("bench/")), "the walk missed bench/");
    let over = over_limit(&files);
    assert!(over.is_empty(), "files over {LINE_LIMIT} lines (split them by what they do):\n{}", over.join("\n"));
}

fn planted(files: &[(&str, &str)]) -> BTreeMap<String, Module> {
    files
        .iter()
        .map(|(name, text)| (name.to_string(), Module { text: text.to_string(), children: declared_children(text) }))
        .collect()
}

#[test]
fn a_circle_through_a_mod_rs_re_export_is_found() {
    // device/mod.rs re-exports a helper of its part accounting; bulk imports it through device; accounting
    // imports bulk: bulk -> device::accounting -> bulk.
    let modules = planted(&[
        ("", "mod bulk;\nmod device;\n"),
        ("bulk", "use crate::device::at_or_after;\npub(crate) fn reserve() {}\n"),
        ("device", "mod accounting;\npub(crate) use accounting::at_or_after;\nuse accounting::SlotHost;\n"),
        ("device::accounting", "use crate::bulk;\npub(crate) fn at_or_after() {}\npub struct SlotHost;\n"),
    ]);
    let graph = import_graph(&modules);
    assert!(graph["bulk"].contains("device::accounting"), "the re-export is followed: {graph:?}");
    assert!(graph["device"].contains("device::accounting"), "a bare path through a child counts: {graph:?}");
    let circle = find_circle(&graph).expect("a circle");
    assert_eq!(circle.first(), circle.last());
    assert!(circle.contains(&"bulk".to_string()), "{circle:?}");
}

#[test]
fn an_arrow_up_a_layer_is_found_and_nested_imports_and_docs_are_read_right() {
    let modules = planted(&[
        ("", "mod error;\nmod device;\n"),
        ("error", "/// crate::device::Router is only mentioned\nuse crate::device::{routing::{Reason}};\n"),
        ("device", "mod routing;\npub use routing::Reason;\n"),
        ("device::routing", "pub enum Reason {}\n"),
    ]);
    let graph = import_graph(&modules);
    assert_eq!(graph["error"], BTreeSet::from(["device::routing".to_string()]));
    let layers: Layers = &[&["error"], &["device"]];
    let found = layer_violations(&graph, layers);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("`error` (layer 0) names `device::routing` (layer 1)"), "{found:?}");
    let unplaced = layer_violations(&graph, &[&["device"]]);
    assert!(unplaced.iter().any(|v| v.contains("`error` is in no layer")), "{unplaced:?}");
}

#[test]
fn a_601_line_kernel_file_is_found() {
    let long = "x\n".repeat(LINE_LIMIT + 1);
    let files = vec![("kernels/protocol/big.cu".to_string(), long), ("kernels/ok.cu".to_string(), "x\n".repeat(600))];
    assert_eq!(over_limit(&files), vec!["kernels/protocol/big.cu: 601 lines".to_string()]);
}
