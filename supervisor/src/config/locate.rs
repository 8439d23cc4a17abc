//! Where a spec error is in its TOML text: the path an error names (`supervisor.children[2][i=7].name`)
//! resolved against the document's spans to a line and column.

use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

/// A parsed document that keeps every key's and value's position.
pub(super) struct Spans<'t> {
    doc: Option<ImDocument<&'t str>>,
    text: &'t str,
}

/// A place in the document: a table's entry, an array-of-tables entry, or an array element.
#[derive(Clone, Copy)]
enum Node<'a> {
    Item(&'a Item),
    Table(&'a Table),
    Value(&'a Value),
}

/// One step of an error's path.
#[derive(Debug, PartialEq, Eq)]
enum Step<'p> {
    Key(&'p str),
    Index(usize),
}

impl<'t> Spans<'t> {
    /// The spans of `text` (none if it does not parse: its syntax error has its own position).
    pub(super) fn of(text: &'t str) -> Self {
        Self { doc: ImDocument::parse(text).ok(), text }
    }

    /// The line and column (from 1) of the deepest part of `path` the document has: the key of the value an
    /// error is about, or the header of the table it is missing from. `None` when not even the path's first
    /// key is in the document.
    pub(super) fn locate(&self, path: &str) -> Option<(usize, usize)> {
        let doc = self.doc.as_ref()?;
        let mut node = Node::Table(doc.as_table());
        let mut best: Option<Range<usize>> = None;
        for step in steps(path) {
            let Some((span, next)) = node.step(&step) else { break };
            best = span.or(best);
            node = next;
        }
        best.map(|span| line_col(self.text, span.start))
    }
}

impl<'a> Node<'a> {
    /// The child `step` names, with the span that shows it (its key, or the array entry).
    fn step(self, step: &Step<'_>) -> Option<(Option<Range<usize>>, Node<'a>)> {
        match (self, step) {
            (Node::Table(t) | Node::Item(Item::Table(t)), Step::Key(key)) => {
                t.get_key_value(key).map(|(k, v)| (k.span(), Node::Item(v)))
            }
            (Node::Item(Item::Value(Value::InlineTable(t))) | Node::Value(Value::InlineTable(t)), Step::Key(key)) => {
                t.get_key_value(key).map(|(k, v)| (k.span(), Node::Item(v)))
            }
            (Node::Item(Item::ArrayOfTables(a)), Step::Index(i)) => a.get(*i).map(|t| (t.span(), Node::Table(t))),
            (Node::Item(Item::Value(Value::Array(a))) | Node::Value(Value::Array(a)), Step::Index(i)) => {
                a.get(*i).map(|v| (v.span(), Node::Value(v)))
            }
            _ => None,
        }
    }
}

/// The steps of a path such as `supervisor.children[2][i=7].init[1].u32` (a template's `[i=7]` names an
/// instance of the entry before it, not a place in the document: skipped).
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        while let Some(open) = rest.strip_prefix('[') {
            let Some(close) = open.find(']') else { break };
            if let Ok(i) = open[..close].parse() {
                out.push(Step::Index(i));
            }
            rest = &open[close + 1..];
        }
    }
    out
}

/// The line and column (from 1, in characters) of byte `offset` of `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"[supervisor]
strategy = "one_fur_one"

[[supervisor.children]]
id = "a"
gpu = "echo"

[[supervisor.children]]
count = 3
id = "w-{i}"
init = [1, { u32 = "x" }]
supervisor = { children = [{ id = "n" }] }
"#;

    #[test]
    fn paths_are_split_into_keys_and_indices() {
        assert_eq!(
            steps("supervisor.children[1][i=2].init[1].u32"),
            [
                Step::Key("supervisor"),
                Step::Key("children"),
                Step::Index(1),
                Step::Key("init"),
                Step::Index(1),
                Step::Key("u32")
            ]
        );
    }

    #[test]
    fn an_error_is_located_at_its_key_or_at_the_table_it_is_missing_from() {
        let spans = Spans::of(TEXT);
        assert_eq!(spans.locate("supervisor.strategy"), Some((2, 1)));
        assert_eq!(spans.locate("supervisor.children[0].gpu"), Some((6, 1)));
        // missing from the second entry: its header
        assert_eq!(spans.locate("supervisor.children[1][i=0].name"), Some((8, 1)));
        assert_eq!(spans.locate("supervisor.children[1][i=2].init[1].u32"), Some((11, 14)));
        assert_eq!(spans.locate("supervisor.children[1].supervisor.children[0].id"), Some((12, 30)));
        assert_eq!(spans.locate("elsewhere"), None);
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(line_col("a\nßx", 4), (2, 2));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}
