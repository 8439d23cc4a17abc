//! Supervision-tree events in one global order: what started, what failed to start, what exited and why.
//! Tests turn them into OTP-comparable traces; users watch them for logs and dashboards.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::policy::ChildType;
use crate::reason::ExitReason;
use crate::sync::lock;

/// One lifecycle step of a supervision tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeEvent {
    /// A supervisor began its start (before its children start).
    SupervisorStarted {
        /// Its id.
        supervisor: String,
    },
    /// A child started.
    ChildStarted {
        /// Its supervisor's id.
        supervisor: String,
        /// The child's id.
        child: String,
        /// Worker or supervisor.
        child_type: ChildType,
    },
    /// A child failed to start.
    ChildStartFailed {
        /// Its supervisor's id.
        supervisor: String,
        /// The child's id.
        child: String,
        /// Worker or supervisor.
        child_type: ChildType,
        /// Why.
        error: String,
    },
    /// A child exited (on its own, or stopped by its supervisor).
    ChildExited {
        /// Its supervisor's id.
        supervisor: String,
        /// The child's id.
        child: String,
        /// Worker or supervisor.
        child_type: ChildType,
        /// Why.
        reason: ExitReason,
    },
    /// A supervisor restarted children under its strategy after `child` exited.
    Restarting {
        /// The supervisor's id.
        supervisor: String,
        /// The child whose exit caused the restart.
        child: String,
    },
    /// A GPU child's slot was given up on: its device actor never acknowledged a kill (stuck inside its
    /// behaviour). The slot is quarantined until the device restarts; the child moved to `to`.
    SlotQuarantined {
        /// The child's id.
        child: String,
        /// The quarantined slot.
        slot: u32,
        /// The slot the child moved to (`None`: no free slot, the start failed).
        to: Option<u32>,
    },
    /// A GPU child whose device was lost moved to another device (the one that replaced it, or another by
    /// failover) as it restarted. Places are (device index, slot).
    DeviceMoved {
        /// The child's id.
        child: String,
        /// Where it was: the lost device and its slot there.
        from: (usize, u32),
        /// Where it runs now.
        to: (usize, u32),
    },
    /// A supervisor exceeded its restart intensity and is shutting down.
    IntensityReached {
        /// The supervisor's id.
        supervisor: String,
        /// The child whose restart exceeded it (its last exit is the `ChildExited` before this event).
        child: String,
    },
    /// A supervisor is shutting down because significant children ended.
    AutoShutdown {
        /// The supervisor's id.
        supervisor: String,
    },
    /// A supervisor finished stopping (all its children are stopped).
    SupervisorStopped {
        /// Its id.
        supervisor: String,
        /// Why it stopped.
        reason: ExitReason,
        /// True for the root of a tree (nested supervisors' exits are also reported by their parent).
        root: bool,
    },
}

/// Fan-out of [`TreeEvent`]s to subscribers, in a single order for the whole tree.
#[derive(Clone, Default)]
pub struct TreeEvents {
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<TreeEvent>>>>,
}

impl TreeEvents {
    /// Every event from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<TreeEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.subscribers).push(tx);
        rx
    }

    pub(crate) fn emit(&self, event: TreeEvent) {
        let mut subs = lock(&self.subscribers);
        // Sending under the lock keeps one order across supervisors; closed subscribers are pruned.
        subs.retain(|tx| tx.send(event.clone()).is_ok());
    }
}
