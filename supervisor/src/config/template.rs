//! Child templates: one `[[children]]` entry with `count = N` declares N children, `{i}` in its strings
//! replaced by each one's index (from `first`, default 0).
//!
//! Validation runs on the expanded spec, so its paths count expanded children; [`SourcePaths`] maps them
//! back to the TOML entry and index they came from (`supervisor.children[2][i=7].name`).

use toml::Value;

/// What a template's strings use for the child's index.
pub(super) const INDEX: &str = "{i}";

/// The most children one template may declare.
pub(super) const MAX_COUNT: i64 = 1_000_000;

/// `item` with [`INDEX`] replaced by `i` in every string, nested entries with a `count` of their own left
/// as they are (their `{i}` is theirs).
pub(super) fn instance(item: &Value, i: i64) -> Value {
    substitute(item, &i.to_string(), true)
}

fn substitute(v: &Value, index: &str, top: bool) -> Value {
    match v {
        Value::String(s) if s.contains(INDEX) => Value::String(s.replace(INDEX, index)),
        Value::Array(items) => Value::Array(items.iter().map(|x| substitute(x, index, false)).collect()),
        Value::Table(t) if top || !t.contains_key("count") => {
            Value::Table(t.iter().map(|(k, x)| (k.clone(), substitute(x, index, false))).collect())
        }
        other => other.clone(),
    }
}

/// The `{...}` placeholders of `text` other than `allowed` (a template replaces only [`INDEX`]; a
/// `simple_one_for_one` child's name may have `{id}`).
pub(super) fn unknown_placeholders<'t>(text: &'t str, allowed: &[&str]) -> Vec<&'t str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else { break };
        let placeholder = &rest[open..open + len + 1];
        if !allowed.contains(&placeholder) {
            out.push(placeholder);
        }
        rest = &rest[open + len + 1..];
    }
    out
}

/// Where each expanded child came from, for the children whose path changed in expansion.
#[derive(Default)]
pub(super) struct SourcePaths {
    /// (expanded path, source path).
    moved: Vec<(String, String)>,
}

impl SourcePaths {
    /// Records that the child validation will see at `expanded` is the TOML entry at `source`.
    pub(super) fn record(&mut self, expanded: &str, source: &str) {
        if expanded != source {
            self.moved.push((expanded.to_string(), source.to_string()));
        }
    }

    /// `text` with every expanded path in it (a word starting with `root`) written as its source path.
    pub(super) fn rewrite(&self, text: &str, root: &str) -> String {
        if self.moved.is_empty() {
            return text.to_string();
        }
        let words: Vec<String> =
            text.split(' ').map(|w| if w.starts_with(root) { self.source_of(w) } else { w.to_string() }).collect();
        words.join(" ")
    }

    /// The source of `path`: the longest recorded expanded path it starts with (at a `.` or `[` boundary,
    /// so `children[5]` does not claim `children[50]`), replaced by its source. Sources of nested children
    /// were built from their parent's source, so one replacement is enough.
    fn source_of(&self, path: &str) -> String {
        let best = self
            .moved
            .iter()
            .filter(|(exp, _)| {
                path.strip_prefix(exp.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
            })
            .max_by_key(|(exp, _)| exp.len());
        match best {
            Some((exp, src)) => format!("{src}{}", &path[exp.len()..]),
            None => path.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_replaces_the_index_except_in_nested_templates() {
        let doc: toml::Table = r#"
            item = { id = "w-{i}", init = [{ u32 = "{i}" }], supervisor = { children = [
                { id = "a-{i}" }, { id = "b-{i}", count = 2 } ] } }
        "#
        .parse()
        .unwrap();
        let inst = instance(&doc["item"], 7);
        assert_eq!(inst["id"].as_str(), Some("w-7"));
        assert_eq!(inst["init"][0]["u32"].as_str(), Some("7"));
        let nested = &inst["supervisor"]["children"];
        assert_eq!(nested[0]["id"].as_str(), Some("a-7"));
        assert_eq!(nested[1]["id"].as_str(), Some("b-{i}"), "a nested template keeps its own index");
    }

    #[test]
    fn placeholders_other_than_the_allowed_ones_are_found() {
        assert_eq!(unknown_placeholders("w-{i}-{j}", &[INDEX]), ["{j}"]);
        assert_eq!(unknown_placeholders("a/{id}/{i}", &[INDEX, "{id}"]), Vec::<&str>::new());
        assert_eq!(unknown_placeholders("{}x{n", &[INDEX]), ["{}"]);
    }

    #[test]
    fn expanded_paths_are_written_as_their_source() {
        let mut paths = SourcePaths::default();
        paths.record("s.children[0]", "s.children[0]");
        paths.record("s.children[5]", "s.children[1][i=4]");
        paths.record("s.children[5].supervisor.children[3]", "s.children[1][i=4].supervisor.children[0][i=3]");
        paths.record("s.children[50]", "s.children[2]");
        let rewrite = |t: &str| paths.rewrite(t, "s.");
        assert_eq!(rewrite("s.children[5].name: taken"), "s.children[1][i=4].name: taken");
        assert_eq!(rewrite("s.children[50].id"), "s.children[2].id");
        assert_eq!(
            rewrite("s.children[5].supervisor.children[3].gpu"),
            "s.children[1][i=4].supervisor.children[0][i=3].gpu"
        );
        assert_eq!(rewrite("\"x\" is also the name of s.children[5]"), "\"x\" is also the name of s.children[1][i=4]");
        assert_eq!(rewrite("s.children[0].id"), "s.children[0].id");
    }
}
