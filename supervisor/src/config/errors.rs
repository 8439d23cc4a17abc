//! What the loader reports: each problem with its path and, for TOML, its file, line and column.

use std::fmt;

/// One problem in a spec, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// Path of the offending value (`supervisor.children[2].restart`); empty for a TOML syntax error.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// The file it is in (errors of [`SpecLoader::load_file`](crate::config::SpecLoader::load_file)).
    pub file: Option<String>,
    /// Line and column (from 1) in the TOML text: the key of the offending value, the header of the table a
    /// key is missing from, or the syntax error. `None` for a spec built in code.
    pub line_col: Option<(usize, usize)>,
}

impl SpecError {
    /// A problem at `path`, not yet located.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into(), file: None, line_col: None }
    }
}

/// `file:line:column: path: message`, each part only when known (`line 3, column 5:` without a file).
impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line_col) {
            (Some(file), Some((line, column))) => write!(f, "{file}:{line}:{column}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            (None, Some((line, column))) => write!(f, "line {line}, column {column}: ")?,
            (None, None) => {}
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A validation problem (`path: message`) as a [`SpecError`].
pub(super) fn split_problem(p: String) -> SpecError {
    match p.split_once(": ") {
        Some((path, message)) => SpecError::new(path, message),
        None => SpecError::new("", p),
    }
}
