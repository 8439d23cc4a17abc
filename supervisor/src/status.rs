//! A child's state, in the three views that need it, kept in step by one method (`Child::set_run` in
//! `supervisor/children.rs`):
//! - [`Run`]: the supervisor's own record, holding the running [`Incarnation`];
//! - [`RunState`]: the same as OTP's `which_children` reports it (`running`, `restarting`, `undefined`);
//! - [`ChildStatus`]: what the child's handles see, with the finer distinctions they act on (a first start,
//!   a spec kept but not running, gone for good).

use std::sync::atomic::{AtomicU8, Ordering};

use ractor::ActorCell;
use tokio::sync::Notify;

/// Where a child is in its life, as its handles see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildStatus {
    /// Being started for the first time.
    Starting,
    /// Running.
    Running,
    /// Exited and about to be (or being) restarted; messages wait for the new incarnation.
    Restarting,
    /// Not running and not being restarted, but its spec is kept (it can be restarted by `restart_child`).
    Stopped,
    /// Gone for good: temporary and ended, deleted, or its supervisor stopped.
    Gone,
}

impl ChildStatus {
    const ALL: [ChildStatus; 5] =
        [ChildStatus::Starting, ChildStatus::Running, ChildStatus::Restarting, ChildStatus::Stopped, ChildStatus::Gone];
}

/// A child's current status, read at any time and waited on for changes: an atomic and a `Notify`, kept in
/// the child's shared state without an allocation of its own (a tree of 100,000 children has 100,000).
pub(crate) struct StatusCell {
    value: AtomicU8,
    changed: Notify,
}

impl StatusCell {
    pub(crate) fn new(status: ChildStatus) -> Self {
        Self { value: AtomicU8::new(status as u8), changed: Notify::new() }
    }

    pub(crate) fn get(&self) -> ChildStatus {
        ChildStatus::ALL[self.value.load(Ordering::Acquire) as usize]
    }

    /// Sets the status and wakes whoever waits for a change.
    pub(crate) fn set(&self, status: ChildStatus) {
        self.value.store(status as u8, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// A change from now on: the future completes at the next [`StatusCell::set`] after this call, even
    /// one made before it is first polled.
    pub(crate) fn next_change(&self) -> impl std::future::Future<Output = ()> + '_ {
        let mut notified = Box::pin(self.changed.notified());
        notified.as_mut().enable();
        notified
    }

    /// Waits until the status satisfies `done`, and returns it.
    pub(crate) async fn wait_for(&self, done: impl Fn(ChildStatus) -> bool) -> ChildStatus {
        loop {
            let change = self.next_change();
            let status = self.get();
            if done(status) {
                return status;
            }
            change.await;
        }
    }
}

/// A child's run state as `which_children` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Running.
    Running,
    /// Being restarted (a start failed and a retry is queued, or a backoff delay runs).
    Restarting,
    /// Not running (OTP `undefined`).
    Undefined,
}

impl ChildStatus {
    /// Its word for messages: `starting`, `running`, `restarting`, `stopped`, `gone`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Restarting => "restarting",
            Self::Stopped => "stopped",
            Self::Gone => "gone",
        }
    }

    /// Stopped or gone: messages to it become dead letters instead of waiting for an incarnation.
    pub fn has_ended(self) -> bool {
        matches!(self, ChildStatus::Stopped | ChildStatus::Gone)
    }
}

impl RunState {
    /// OTP's word for it: `running`, `restarting`, `undefined`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Restarting => "restarting",
            Self::Undefined => "undefined",
        }
    }
}

/// A running incarnation, as its supervisor knows it.
pub(crate) enum Incarnation {
    /// A ractor actor (a host actor child, a nested supervisor), linked to the supervisor.
    Actor(ActorCell),
    /// A GPU child's device actor, by its generation in the child's slot: no host actor of its own (the
    /// supervisor drives the slot and hears of the incarnation's end through notices, see `gpu/mod.rs`).
    Gpu(u32),
}

impl Incarnation {
    /// The ractor actor, for host actors and supervisors.
    pub(crate) fn actor(&self) -> Option<&ActorCell> {
        match self {
            Incarnation::Actor(cell) => Some(cell),
            Incarnation::Gpu(_) => None,
        }
    }
}

/// The supervisor's record of a child's incarnation.
pub(crate) enum Run {
    /// Running.
    Running(Incarnation),
    /// Being restarted (a start failed and a retry is queued, or a backoff delay runs).
    Restarting,
    /// Not running.
    Undefined,
}

impl Run {
    /// The running incarnation.
    pub(crate) fn incarnation(&self) -> Option<&Incarnation> {
        match self {
            Run::Running(incarnation) => Some(incarnation),
            _ => None,
        }
    }

    /// As `which_children` reports it.
    pub(crate) fn state(&self) -> RunState {
        match self {
            Run::Running(_) => RunState::Running,
            Run::Restarting => RunState::Restarting,
            Run::Undefined => RunState::Undefined,
        }
    }
}
