//! The named registry: hierarchical names (`fleet/sensors/7`) bound to stable child handles, looked up by
//! exact name or by pattern (`*` one segment, `**` any number of segments, `?` one character).
//!
//! Exact lookups go through a concurrent map; pattern lookups walk a trie of segments, so a pattern with a
//! literal prefix visits only that subtree, not every name.

use std::collections::BTreeMap;
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

fn segment_ok(seg: &str) -> bool {
    seg.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'@' | b'+'))
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg<'p> {
    Literal(&'p str),
    /// A segment with `?`: each `?` matches one character.
    Glob(&'p str),
    /// `*`: exactly one segment.
    Any,
    /// `**`: zero or more segments.
    AnyDepth,
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
            s if s.contains('*') => return bad("`*` and `**` must be whole segments"),
            s if s.contains('?') => {
                if !segment_ok(&s.replace('?', "")) {
                    return bad("segments may hold only letters, digits, `_ - . : @ +` and wildcards");
                }
                Seg::Glob(s)
            }
            s if segment_ok(s) => Seg::Literal(s),
            _ => return bad("segments may hold only letters, digits, `_ - . : @ +` and wildcards"),
        });
    }
    Ok(segs)
}

/// Whether `seg` matches `glob`, where each `?` stands for one character.
fn glob_matches(glob: &str, seg: &str) -> bool {
    let mut chars = seg.chars();
    for g in glob.chars() {
        match chars.next() {
            None => return false,
            Some(c) if g != '?' && g != c => return false,
            Some(_) => {}
        }
    }
    chars.next().is_none()
}

/// A child segment's key: its length in bytes, then the segment. Ordered so that a glob (`s1?`: fixed length,
/// literal prefix) is one range query visiting only the names of its length with its prefix.
type SegKey = (usize, String);

fn key(seg: &str) -> SegKey {
    (seg.len(), seg.to_string())
}

#[derive(Default)]
struct Node {
    children: BTreeMap<SegKey, Node>,
    /// The child bound to the name that ends here.
    value: Option<ChildRef>,
}

impl Node {
    fn insert(&mut self, segs: &[&str], child: ChildRef) {
        match segs.split_first() {
            None => self.value = Some(child),
            Some((first, rest)) => self.children.entry(key(first)).or_default().insert(rest, child),
        }
    }

    /// Removes a name; returns true when this node became empty (prunable).
    fn remove(&mut self, segs: &[&str]) -> bool {
        match segs.split_first() {
            None => self.value = None,
            Some((first, rest)) => {
                let k = key(first);
                if let Some(child) = self.children.get_mut(&k) {
                    if child.remove(rest) {
                        self.children.remove(&k);
                    }
                }
            }
        }
        self.value.is_none() && self.children.is_empty()
    }

    /// Appends to `out` every name under this node (whose own name is `path`) matching `pat`.
    fn collect(&self, pat: &[Seg<'_>], path: &mut String, out: &mut Vec<(String, ChildRef)>, visits: &mut usize) {
        *visits += 1;
        let Some((first, rest)) = pat.split_first() else {
            if let Some(child) = &self.value {
                out.push((path.clone(), child.clone()));
            }
            return;
        };
        fn descend(
            name: &str,
            child: &Node,
            rest: &[Seg<'_>],
            path: &mut String,
            out: &mut Vec<(String, ChildRef)>,
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
        match *first {
            Seg::Literal(lit) => {
                if let Some(child) = self.children.get(&key(lit)) {
                    descend(lit, child, rest, path, out, visits);
                }
            }
            Seg::Glob(glob) => {
                // `?` is one character; names are ASCII (checked at bind), so one byte.
                let prefix = &glob[..glob.find('?').unwrap_or(glob.len())];
                let candidates = self
                    .children
                    .range((glob.len(), prefix.to_string())..)
                    .take_while(|((len, name), _)| *len == glob.len() && name.starts_with(prefix));
                for ((_, name), child) in candidates {
                    if glob_matches(glob, name) {
                        descend(name, child, rest, path, out, visits);
                    }
                }
            }
            Seg::Any => {
                for ((_, name), child) in &self.children {
                    descend(name, child, rest, path, out, visits);
                }
            }
            Seg::AnyDepth => {
                // Zero segments here, or one segment and `**` again.
                self.collect(rest, path, out, visits);
                for ((_, name), child) in &self.children {
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

    fn notify(&self, event: RegistryEvent) {
        tracing::trace!(?event, "registry");
        lock(&self.inner.watchers).retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// Binds `name` to `child`. Binding a name again to the same child is a no-op; binding it to another
    /// child is [`RegistryError::Taken`].
    pub fn bind(&self, name: &str, child: ChildRef) -> Result<(), RegistryError> {
        validate_name(name)?;
        match self.inner.names.entry(name.to_string()) {
            dashmap::Entry::Occupied(e) if e.get().same_child(&child) => return Ok(()),
            dashmap::Entry::Occupied(_) => return Err(RegistryError::Taken(name.to_string())),
            dashmap::Entry::Vacant(v) => {
                // The index is updated while the map entry is held, so bind/unbind of one name serialise.
                let segs: Vec<&str> = name.split('/').collect();
                write(&self.inner.index).insert(&segs, child.clone());
                v.insert(child);
            }
        }
        self.notify(RegistryEvent::Registered(name.to_string()));
        Ok(())
    }

    /// Releases `name` if it is bound to `child` (a no-op otherwise).
    pub fn unbind(&self, name: &str, child: &ChildRef) {
        let removed = self.inner.names.remove_if(name, |_, bound| bound.same_child(child)).is_some();
        if removed {
            let segs: Vec<&str> = name.split('/').collect();
            write(&self.inner.index).remove(&segs);
            self.notify(RegistryEvent::Unregistered(name.to_string()));
        }
    }

    /// Announces that the child bound to `name` restarted.
    pub(crate) fn rebound(&self, name: &str) {
        metrics::counter!("ringvisor_registry_rebinds_total").increment(1);
        self.notify(RegistryEvent::Rebound(name.to_string()));
    }

    /// The child bound to `name`.
    pub fn lookup(&self, name: &str) -> Option<ChildRef> {
        self.inner.names.get(name).map(|e| e.value().clone())
    }

    /// Every `(name, child)` whose name matches `pattern`, sorted by name.
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
        index.collect(&segs, &mut String::with_capacity(64), &mut found, &mut visits);
        drop(index);
        // Segment order is not name order (`a-c` < `a/b`), and `**` can reach a name by two ways.
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found.dedup_by(|a, b| a.0 == b.0);
        Ok((found, visits))
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

    #[test]
    fn globs_match_whole_segments() {
        assert!(glob_matches("s?n", "sun"));
        assert!(!glob_matches("s?n", "su"));
        assert!(!glob_matches("s?n", "sunn"));
        assert!(!glob_matches("s?n", "tun"));
    }

    #[test]
    fn pattern_errors_say_why() {
        for (p, why) in
            [("", "empty"), ("a//b", "empty segment"), ("a/b*/c", "whole segments"), ("a/b c", "only letters")]
        {
            match parse_pattern(p) {
                Err(RegistryError::InvalidPattern { why: w, .. }) => assert!(w.contains(why), "{p}: {w}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }
}
