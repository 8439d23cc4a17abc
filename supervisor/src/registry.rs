//! The named registry: hierarchical names (`fleet/sensors/7`) bound to stable child handles, looked up by
//! exact name or by pattern: `*` as a whole segment is one segment, `**` any number of segments; inside a
//! segment, `*` is any run of characters, `?` one character, `[a-z_]` (or `[!a-z]`) one character of a class.
//!
//! Exact lookups go through a concurrent map; pattern lookups walk a trie of segments, so a pattern with a
//! literal prefix visits only that subtree, not every name.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};

use dashmap::DashMap;
use tokio::sync::mpsc;

pub use crate::error::RegistryError;
use crate::handle::ChildRef;
use crate::sync::{lock, read, write};

/// Longest name or pattern accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// A change in the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryEvent {
    /// A name was bound.
    Registered(String),
    /// The child bound to a name was restarted: the name now designates its new incarnation.
    Rebound(String),
    /// A name was released.
    Unregistered(String),
}

/// Whether `b` may appear in a name: an ASCII letter or digit, or one of `_ - . : @ +`.
fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'@' | b'+')
}

fn segment_ok(seg: &str) -> bool {
    seg.bytes().all(name_byte)
}

/// Checks a name: non-empty `/`-separated segments of letters, digits and `_ - . : @ +`.
pub fn validate_name(name: &str) -> Result<(), RegistryError> {
    let bad = |why| Err(RegistryError::InvalidName { name: name.to_string(), why });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 512 bytes");
    }
    for seg in name.split('/') {
        if seg.is_empty() {
            return bad("empty segment (leading, trailing or double `/`)");
        }
        if !segment_ok(seg) {
            return bad("segments may hold only letters, digits and `_ - . : @ +` (no wildcards)");
        }
    }
    Ok(())
}

/// One segment of a parsed pattern (borrowing the pattern).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg<'p> {
    Literal(&'p str),
    /// A segment with wildcards inside it (`s1*`, `s?`, `[ab]x`).
    Glob(Glob<'p>),
    /// `*`: exactly one segment.
    Any,
    /// `**`: zero or more segments.
    AnyDepth,
}

/// One element of a segment glob; each but `Star` matches exactly one character.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Lit(u8),
    /// `?`: any one character.
    One,
    /// `*`: any run of characters, empty included (never `/`: globs stay inside their segment).
    Star,
    /// `[a-z_]` or its negation `[!a-z]` / `[^a-z]`: inclusive byte ranges.
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

impl Tok {
    fn matches(&self, c: u8) -> bool {
        match self {
            Tok::Lit(l) => *l == c,
            Tok::One => true,
            Tok::Star => false,
            Tok::Class { negated, ranges } => ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c)) != *negated,
        }
    }
}

/// A segment glob, compiled: its elements, the literal prefix before its first wildcard (the index's range
/// query starts there) and the segment lengths it can match.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Glob<'p> {
    toks: Vec<Tok>,
    prefix: &'p str,
    min_len: usize,
    /// `None` when the glob holds a `*`.
    max_len: Option<usize>,
    /// The glob is its literal prefix and one final `*`: every segment with the prefix matches.
    prefix_and_star: bool,
}

const BAD_CHARS: &str = "segments may hold only letters, digits, `_ - . : @ +` and the wildcards `* ? [...]`";

impl<'p> Glob<'p> {
    fn parse(seg: &'p str) -> Result<Self, &'static str> {
        if seg.contains("**") {
            return Err("`**` must be a whole segment (within a segment, `*` matches any run of characters)");
        }
        let bytes = seg.as_bytes();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            i += 1;
            toks.push(match b {
                b'*' => Tok::Star,
                b'?' => Tok::One,
                b'[' => {
                    let close =
                        bytes[i..].iter().position(|&c| c == b']').ok_or("unclosed `[` in a character class")?;
                    let class = Self::class(&bytes[i..i + close])?;
                    i += close + 1;
                    class
                }
                b if name_byte(b) => Tok::Lit(b),
                _ => return Err(BAD_CHARS),
            });
        }
        let literal = toks.iter().take_while(|t| matches!(t, Tok::Lit(_))).count();
        let min_len = toks.iter().filter(|t| !matches!(t, Tok::Star)).count();
        let max_len = (!toks.contains(&Tok::Star)).then_some(min_len);
        // Literals are single ASCII bytes, so the prefix is the glob's first `literal` bytes.
        let prefix_and_star = toks.len() == literal + 1 && toks.last() == Some(&Tok::Star);
        Ok(Self { prefix: &seg[..literal], toks, min_len, max_len, prefix_and_star })
    }

    /// The inside of `[...]`: an optional `!` or `^`, then characters and `a-z` ranges.
    fn class(inner: &[u8]) -> Result<Tok, &'static str> {
        let (negated, mut rest) = match inner.first() {
            Some(b'!' | b'^') => (true, &inner[1..]),
            _ => (false, inner),
        };
        if rest.is_empty() {
            return Err("empty character class `[]`");
        }
        let mut ranges = Vec::new();
        while let Some(&lo) = rest.first() {
            if !name_byte(lo) {
                return Err(BAD_CHARS);
            }
            match rest {
                [_, b'-', hi, ..] => {
                    if !name_byte(*hi) {
                        return Err(BAD_CHARS);
                    }
                    if *hi < lo {
                        return Err("a character class range runs backwards (`[z-a]`)");
                    }
                    ranges.push((lo, *hi));
                    rest = &rest[3..];
                }
                _ => {
                    ranges.push((lo, lo));
                    rest = &rest[1..];
                }
            }
        }
        Ok(Tok::Class { negated, ranges })
    }

    /// Whether the whole of `seg` matches (a `*` backtracks to the last star only: linear for one star,
    /// at worst quadratic in the segment's length).
    fn matches(&self, seg: &str) -> bool {
        let s = seg.as_bytes();
        let (mut t, mut i) = (0, 0);
        let mut last_star: Option<(usize, usize)> = None;
        while i < s.len() {
            match self.toks.get(t) {
                Some(Tok::Star) => {
                    last_star = Some((t, i));
                    t += 1;
                    continue;
                }
                Some(tok) if tok.matches(s[i]) => {
                    t += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            match last_star {
                // Let the last `*` take one more character and retry from there.
                Some((star, from)) => {
                    last_star = Some((star, from + 1));
                    t = star + 1;
                    i = from + 1;
                }
                None => return false,
            }
        }
        self.toks[t..].iter().all(|tok| *tok == Tok::Star)
    }
}

fn parse_pattern(pattern: &str) -> Result<Vec<Seg<'_>>, RegistryError> {
    let bad = |why| Err(RegistryError::InvalidPattern { pattern: pattern.to_string(), why });
    if pattern.is_empty() {
        return bad("empty");
    }
    if pattern.len() > MAX_NAME_LEN {
        return bad("longer than 512 bytes");
    }
    let mut segs = Vec::new();
    for seg in pattern.split('/') {
        segs.push(match seg {
            "" => return bad("empty segment (leading, trailing or double `/`)"),
            "*" => Seg::Any,
            "**" => Seg::AnyDepth,
            s if segment_ok(s) => Seg::Literal(s),
            s => match Glob::parse(s) {
                Ok(glob) => Seg::Glob(glob),
                Err(why) => return bad(why),
            },
        });
    }
    Ok(segs)
}

/// A trie node; its children are keyed by segment, in byte order, so a glob with a literal prefix is one
/// range query visiting only the segments with that prefix.
#[derive(Default)]
struct Node {
    children: BTreeMap<String, Node>,
    /// The child bound to the name that ends here.
    value: Option<ChildRef>,
}

impl Node {
    fn insert(&mut self, segs: &[&str], child: ChildRef) {
        match segs.split_first() {
            None => self.value = Some(child),
            // looked up by `&str` first: a name under a segment that exists (most of them) allocates nothing here
            Some((first, rest)) => match self.children.get_mut(*first) {
                Some(node) => node.insert(rest, child),
                None => self.children.entry(first.to_string()).or_default().insert(rest, child),
            },
        }
    }

    /// Removes a name; returns true when this node became empty (prunable).
    fn remove(&mut self, segs: &[&str]) -> bool {
        match segs.split_first() {
            None => self.value = None,
            Some((first, rest)) => {
                if let Some(child) = self.children.get_mut(*first) {
                    if child.remove(rest) {
                        self.children.remove(*first);
                    }
                }
            }
        }
        self.value.is_none() && self.children.is_empty()
    }

    /// Hands `out` every name under this node (whose own name is `path`) matching `pat`, with its child.
    fn collect(&self, pat: &[Seg<'_>], path: &mut String, out: &mut dyn FnMut(&str, &ChildRef), visits: &mut usize) {
        *visits += 1;
        let Some((first, rest)) = pat.split_first() else {
            if let Some(child) = &self.value {
                out(path, child);
            }
            return;
        };
        fn descend(
            name: &str,
            child: &Node,
            rest: &[Seg<'_>],
            path: &mut String,
            out: &mut dyn FnMut(&str, &ChildRef),
            visits: &mut usize,
        ) {
            let len = path.len();
            if len > 0 {
                path.push('/');
            }
            path.push_str(name);
            child.collect(rest, path, out, visits);
            path.truncate(len);
        }
        match first {
            Seg::Literal(lit) => {
                if let Some(child) = self.children.get(*lit) {
                    descend(lit, child, rest, path, out, visits);
                }
            }
            Seg::Glob(glob) => {
                let same_prefix = self
                    .children
                    .range::<str, _>((Bound::Included(glob.prefix), Bound::Unbounded))
                    .take_while(|(name, _)| name.starts_with(glob.prefix));
                for (name, child) in same_prefix {
                    let fits = name.len() >= glob.min_len && glob.max_len.is_none_or(|max| name.len() <= max);
                    if glob.prefix_and_star || (fits && glob.matches(name)) {
                        descend(name, child, rest, path, out, visits);
                    }
                }
            }
            Seg::Any => {
                for (name, child) in &self.children {
                    descend(name, child, rest, path, out, visits);
                }
            }
            Seg::AnyDepth => {
                // Zero segments here, or one segment and `**` again.
                self.collect(rest, path, out, visits);
                for (name, child) in &self.children {
                    descend(name, child, pat, path, out, visits);
                }
            }
        }
    }
}

struct Inner {
    names: DashMap<String, ChildRef>,
    index: RwLock<Node>,
    watchers: Mutex<Vec<mpsc::UnboundedSender<RegistryEvent>>>,
}

/// The registry. Cheap to clone (clones share it); safe to use from any thread.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                names: DashMap::new(),
                index: RwLock::new(Node::default()),
                watchers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Tells the watchers (the event is made only if there are any).
    fn publish(&self, event: impl FnOnce() -> RegistryEvent) {
        let mut watchers = lock(&self.inner.watchers);
        if watchers.is_empty() && !tracing::enabled!(tracing::Level::TRACE) {
            return;
        }
        let event = event();
        tracing::trace!(?event, "registry");
        watchers.retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// Binds `name` to `child`. Binding a name again to the same child is a no-op; binding it to another
    /// child is [`RegistryError::Taken`].
    pub fn bind(&self, name: &str, child: ChildRef) -> Result<(), RegistryError> {
        self.bind_new(name, child).map(|_| ())
    }

    /// [`Registry::bind`]; `Ok(false)` when the name was bound to this child already (a restart).
    pub(crate) fn bind_new(&self, name: &str, child: ChildRef) -> Result<bool, RegistryError> {
        validate_name(name)?;
        match self.inner.names.entry(name.to_string()) {
            dashmap::Entry::Occupied(e) if e.get().same_child(&child) => return Ok(false),
            dashmap::Entry::Occupied(_) => return Err(RegistryError::Taken(name.to_string())),
            dashmap::Entry::Vacant(v) => {
                // The index is updated while the map entry is held, so bind/unbind of one name serialise.
                let segs: Vec<&str> = name.split('/').collect();
                write(&self.inner.index).insert(&segs, child.clone());
                v.insert(child);
            }
        }
        self.publish(|| RegistryEvent::Registered(name.to_string()));
        Ok(true)
    }

    /// Releases `name` if it is bound to `child` (a no-op otherwise).
    pub fn unbind(&self, name: &str, child: &ChildRef) {
        let removed = self.inner.names.remove_if(name, |_, bound| bound.same_child(child)).is_some();
        if removed {
            let segs: Vec<&str> = name.split('/').collect();
            write(&self.inner.index).remove(&segs);
            self.publish(|| RegistryEvent::Unregistered(name.to_string()));
        }
    }

    /// Announces that the child bound to `name` restarted.
    pub(crate) fn rebound(&self, name: &str) {
        metrics::counter!("ringvisor_registry_rebinds_total").increment(1);
        self.publish(|| RegistryEvent::Rebound(name.to_string()));
    }

    /// The child bound to `name`.
    pub fn lookup(&self, name: &str) -> Option<ChildRef> {
        self.inner.names.get(name).map(|e| e.value().clone())
    }

    /// Every `(name, child)` whose name matches `pattern`, sorted by name segment by segment (`a/b` before
    /// `a-c`: a name's subtree comes right after it).
    pub fn find(&self, pattern: &str) -> Result<Vec<(String, ChildRef)>, RegistryError> {
        self.find_counting(pattern).map(|(found, _)| found)
    }

    /// [`Registry::find`], also returning how many index nodes the lookup visited (to check that a
    /// pattern with a literal prefix does not scan every name).
    pub fn find_counting(&self, pattern: &str) -> Result<(Vec<(String, ChildRef)>, usize), RegistryError> {
        let segs = parse_pattern(pattern)?;
        let mut found = Vec::new();
        let mut visits = 0;
        let index = read(&self.inner.index);
        let mut keep = |name: &str, child: &ChildRef| found.push((name.to_string(), child.clone()));
        index.collect(&segs, &mut String::with_capacity(64), &mut keep, &mut visits);
        drop(index);
        // Without `**` the walk visits names in segment order already; `**` tries a name's subtree before
        // its siblings' (`**/1` finds `1` before `0/1`), and two of them can reach a name by two ways.
        if segs.contains(&Seg::AnyDepth) {
            found.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
            found.dedup_by(|a, b| a.0 == b.0);
        }
        Ok((found, visits))
    }

    /// Calls `visit` with every name matching `pattern` and its child, borrowed: [`Registry::find`]'s
    /// results in its order, without allocating a name or cloning a handle per match (for large result sets,
    /// or to count). Returns how many matched. `visit` runs while the registry's index is read-locked: it
    /// must not bind or unbind names (collect what it needs and act afterwards). A pattern with `**` is
    /// collected with `find` first (its order needs a sort).
    pub fn for_each_match(
        &self,
        pattern: &str,
        mut visit: impl FnMut(&str, &ChildRef),
    ) -> Result<usize, RegistryError> {
        let segs = parse_pattern(pattern)?;
        if segs.contains(&Seg::AnyDepth) {
            let found = self.find(pattern)?;
            found.iter().for_each(|(name, child)| visit(name, child));
            return Ok(found.len());
        }
        let mut matched = 0;
        let mut count = |name: &str, child: &ChildRef| {
            matched += 1;
            visit(name, child)
        };
        read(&self.inner.index).collect(&segs, &mut String::with_capacity(64), &mut count, &mut 0);
        Ok(matched)
    }

    /// Every registry change from now on.
    pub fn watch(&self) -> mpsc::UnboundedReceiver<RegistryEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.inner.watchers).push(tx);
        rx
    }

    /// Number of names bound.
    pub fn len(&self) -> usize {
        self.inner.names.len()
    }

    /// True when no name is bound.
    pub fn is_empty(&self) -> bool {
        self.inner.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(g: &str) -> Glob<'_> {
        Glob::parse(g).unwrap_or_else(|why| panic!("{g}: {why}"))
    }

    #[test]
    fn globs_match_whole_segments() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("s?n", &["sun", "s-n"], &["su", "sunn", "tun", ""]),
            ("s1*", &["s1", "s10", "s1999"], &["s", "s2", "xs1"]),
            ("*x", &["x", "abx", "xxx"], &["xa", ""]),
            ("a*b*c", &["abc", "aXbYc", "abbbc", "acbc"], &["ab", "acb", "abcx"]),
            ("[ab]?", &["a1", "bz"], &["c1", "a", "ab1"]),
            ("n[0-3]", &["n0", "n3"], &["n4", "n", "n00"]),
            ("n[!0-3]", &["n4", "nz"], &["n0", "n"]),
            ("n[^0-3-]", &["n4"], &["n-", "n2"]),
            ("*", &["", "anything"], &[]),
        ];
        for (g, yes, no) in cases {
            for s in *yes {
                assert!(glob(g).matches(s), "{g} should match {s:?}");
            }
            for s in *no {
                assert!(!glob(g).matches(s), "{g} should not match {s:?}");
            }
        }
        assert_eq!(glob("s1*").prefix, "s1");
        assert_eq!((glob("s1*").min_len, glob("s1*").max_len), (2, None));
        assert_eq!((glob("[ab]?").min_len, glob("[ab]?").max_len, glob("[ab]?").prefix), (2, Some(2), ""));
    }

    #[test]
    fn pattern_errors_say_why() {
        for (p, why) in [
            ("", "empty"),
            ("a//b", "empty segment"),
            ("a/b**/c", "whole segment"),
            ("a/b c", "only letters"),
            ("a/[bc", "unclosed"),
            ("a/[]", "empty character class"),
            ("a/[!]", "empty character class"),
            ("a/[z-a]", "backwards"),
            ("a/[b c]", "only letters"),
            ("a/\u{e9}*", "only letters"),
            ("a/[\u{e9}]", "only letters"),
        ] {
            match parse_pattern(p) {
                Err(RegistryError::InvalidPattern { why: w, .. }) => assert!(w.contains(why), "{p}: {w}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }
}
