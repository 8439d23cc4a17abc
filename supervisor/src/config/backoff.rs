//! A child's `backoff = { initial_ms, max_ms, jitter, reset_after_ms }` (beyond OTP: a delay before a restart).

use std::time::Duration;

use toml::Value;

use super::Walker;
use crate::policy::Backoff;

impl Walker<'_> {
    /// The backoff table at `path`.
    pub(super) fn backoff(&mut self, v: &Value, path: &str) -> Option<Backoff> {
        let t = self.table(v, path)?;
        self.unknown_keys(t, path, &["initial_ms", "max_ms", "jitter", "reset_after_ms"]);
        let initial = self.integer(t, "initial_ms", path, 1);
        let max = self.integer(t, "max_ms", path, 1);
        if !t.contains_key("initial_ms") {
            self.err(&format!("{path}.initial_ms"), "missing");
        }
        if !t.contains_key("max_ms") {
            self.err(&format!("{path}.max_ms"), "missing");
        }
        let mut b = Backoff::exponential(Duration::from_millis(initial? as u64), Duration::from_millis(max? as u64));
        if t.contains_key("jitter") {
            match self.number(t, "jitter", path) {
                Some(j) if (0.0..=1.0).contains(&j) => b = b.jitter(j),
                Some(j) => self.err(&format!("{path}.jitter"), format!("must be between 0 and 1, found {j}")),
                None => {}
            }
        }
        if t.contains_key("reset_after_ms") {
            b = b.reset_after(Duration::from_millis(self.integer(t, "reset_after_ms", path, 0)? as u64));
        }
        Some(b)
    }
}
