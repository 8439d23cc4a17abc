//! The building blocks of the `ringvisor` command (feature `cli`): the sensor-fleet demo, watching a
//! running tree (snapshots, the live view, progress lines, JSON events), the Prometheus endpoint, chaos
//! runs of declared trees, and a declared tree as a table (`check`). Each is usable on its own, which is how the tests drive them.

pub mod chaos;
pub mod command;
pub mod demo;
pub mod live;
pub mod monitor;
pub mod prometheus;
pub mod report;
pub mod tree_table;

/// Locks `m`, ignoring poisoning (the command's shared counters stay meaningful after a panicked task).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
