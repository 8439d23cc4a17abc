//! The layout rules of `device/src` and `supervisor/src`, checked so they stay true: no import circle among a
//! crate's files (a folder's `mod.rs` and its parts aside: the parts use the parent's types), and no file over
//! 600 lines unless its module doc says why (a line `//! Over 600 lines: ...`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const LINE_LIMIT: usize = 600;

/// Every module of the crate under `src`, by path (`device::accounting`), with its source text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] {
                continue;
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&path).expect("readable"));
        }
    }
    out
}

/// The text without comment lines (docs mention paths they do not import).
fn code(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// `a::{b, c::{d}}` -> `a::b`, `a::c::d`.
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
            None => out.push(format!("{prefix}{}", item.split(" as ").next().unwrap_or(item).trim())),
        }
    }
}

/// The crate-relative paths module `module` uses: `use crate::..`, `use super::..`, and inline `crate::..`.
fn used_paths(module: &str, text: &str) -> Vec<String> {
    let text = code(text);
    let parent = module.rsplit_once("::").map_or("", |p| p.0);
    let mut out = Vec::new();
    for (keyword, base) in [("use crate::", String::new()), ("use super::", parent.to_string())] {
        for (at, _) in text.match_indices(keyword) {
            let rest = &text[at + keyword.len()..];
            let stmt = &rest[..rest.find(';').unwrap_or(rest.len())];
            let prefix = if base.is_empty() { String::new() } else { format!("{base}::") };
            expand(&prefix, stmt.trim_start_matches('{').trim_end_matches('}'), &mut out);
        }
    }
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
        out.push(rest[..end].to_string());
    }
    out
}

/// The longest module that `path` names, if any.
fn resolve<'a>(path: &str, modules: &'a BTreeMap<String, String>) -> Option<&'a str> {
    let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    (1..=parts.len()).rev().find_map(|n| modules.get_key_value(&parts[..n].join("::")).map(|(k, _)| k.as_str()))
}

/// Module -> the modules it imports, siblings and cousins only (not its own ancestors).
fn import_graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    modules
        .iter()
        .map(|(name, text)| {
            let deps = used_paths(name, text)
                .iter()
                .filter_map(|p| resolve(p, modules))
                .filter(|d| d != name && !name.starts_with(&format!("{d}::")))
                .map(str::to_string)
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

fn crate_src(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name).join("src")
}

#[test]
fn no_import_circle_among_the_files_of_device_and_supervisor() {
    for krate in ["device", "supervisor"] {
        let modules = modules(&crate_src(krate));
        assert!(modules.len() > 10, "{krate}: found only {:?}", modules.keys());
        let graph = import_graph(&modules);
        if let Some(circle) = find_circle(&graph) {
            panic!("{krate}/src: import circle {}", circle.join(" -> "));
        }
    }
}

#[test]
fn no_file_of_device_or_supervisor_is_over_600_lines_without_a_reason() {
    for krate in ["device", "supervisor"] {
        for (name, text) in modules(&crate_src(krate)) {
            let lines = text.lines().count();
            let reason = text.lines().take_while(|l| l.starts_with("//!")).any(|l| l.contains("Over 600 lines:"));
            assert!(lines <= LINE_LIMIT || reason, "{krate}::{name}: {lines} lines and no stated reason");
        }
    }
}

#[test]
fn the_circle_finder_finds_a_planted_circle_and_parses_nested_imports() {
    let mut modules = BTreeMap::new();
    modules.insert("a".to_string(), "use crate::{b::{X, Y as Z}, c};\n/// crate::d is only mentioned\n".to_string());
    modules.insert("b".to_string(), "fn f() { crate::c::g() }".to_string());
    modules.insert("c".to_string(), "use super::a::Thing;".to_string());
    modules.insert("d".to_string(), String::new());
    let graph = import_graph(&modules);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string(), "c".to_string()]), "docs do not count");
    let circle = find_circle(&graph).expect("a -> b -> c -> a");
    assert_eq!(circle.first(), circle.last());
    modules.insert("c".to_string(), "use crate::d;".to_string());
    assert_eq!(find_circle(&import_graph(&modules)), None);
}
