//! A child's state, in the three views that need it, kept in step by one method (`Child::set_run` in
//! `supervisor/children.rs`):
//! - [`Run`]: the supervisor's own record, holding the running [`Incarnation`];
//! - [`RunState`]: the same as OTP's `which_children` reports it (`running`, `restarting`, `undefined`);
//! - [`ChildStatus`]: what the child's handles see, with the finer distinctions they act on (a first start,
//!   a spec kept but not running, gone for good).

use ractor::ActorCell;

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
