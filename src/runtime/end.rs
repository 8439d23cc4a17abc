//! Why a runtime ended: the top supervisor's events, folded as they come by one task per runtime.

use std::fmt;

use ringvisor_supervisor::{ExitReason, SupervisorRef, TreeEvent};
use tokio::sync::{mpsc, watch};

use super::TOP_SUPERVISOR;

/// Why a [`Runtime`](crate::Runtime)'s tree stopped running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeEnd {
    /// Stopped from outside: [`Runtime::shutdown`](crate::Runtime::shutdown), or the top supervisor shut down
    /// by hand.
    Shutdown,
    /// The user's root supervisor ended on its own, and the runtime with it.
    RootEnded {
        /// True when it gave up: its restart intensity was reached (failures it could not contain). False
        /// when it stopped by itself (its `auto_shutdown`, or a normal exit).
        gave_up: bool,
        /// Its exit reason.
        reason: ExitReason,
        /// When it gave up: its child whose restart exceeded the intensity (a nested supervisor's id when the
        /// failures escalated from below: its own `TreeEvent::IntensityReached` names the child there).
        child: Option<String>,
    },
    /// The device failed (lost, or too many quarantined slots) more often than
    /// [`RuntimeBuilder::device_restarts`](crate::RuntimeBuilder::device_restarts) allows.
    DeviceGaveUp,
}

impl fmt::Display for RuntimeEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeEnd::Shutdown => write!(f, "shut down"),
            RuntimeEnd::RootEnded { gave_up: true, reason, child } => {
                write!(f, "the root supervisor gave up (restart intensity reached")?;
                if let Some(child) = child {
                    write!(f, " by child `{child}`")?;
                }
                write!(f, ") and exited: {reason}")
            }
            RuntimeEnd::RootEnded { gave_up: false, reason, .. } => write!(f, "the root supervisor exited: {reason}"),
            RuntimeEnd::DeviceGaveUp => write!(f, "the device failed more often than its restart limit allows"),
        }
    }
}

/// What the top supervisor's events said so far.
struct Fold {
    root_id: String,
    /// The root gave up: its child named by the root's `IntensityReached`.
    root_gave_up_on: Option<String>,
    root_exit: Option<ExitReason>,
    top_gave_up: bool,
    top_auto_shutdown: bool,
}

impl Fold {
    fn new(root_id: String) -> Self {
        Self { root_id, root_gave_up_on: None, root_exit: None, top_gave_up: false, top_auto_shutdown: false }
    }

    /// Takes one event; the end once the top supervisor has stopped.
    fn step(&mut self, event: TreeEvent) -> Option<RuntimeEnd> {
        match event {
            TreeEvent::IntensityReached { supervisor, .. } if supervisor == TOP_SUPERVISOR => self.top_gave_up = true,
            TreeEvent::IntensityReached { supervisor, child } if supervisor == self.root_id => {
                self.root_gave_up_on = Some(child);
            }
            // A new incarnation of the root (after a device restart) starts with a clean record.
            TreeEvent::ChildStarted { supervisor, child, .. }
                if supervisor == TOP_SUPERVISOR && child == self.root_id =>
            {
                self.root_gave_up_on = None;
                self.root_exit = None;
            }
            TreeEvent::ChildExited { supervisor, child, reason, .. }
                if supervisor == TOP_SUPERVISOR && child == self.root_id =>
            {
                self.root_exit = Some(reason)
            }
            TreeEvent::AutoShutdown { supervisor } if supervisor == TOP_SUPERVISOR => self.top_auto_shutdown = true,
            TreeEvent::SupervisorStopped { supervisor, root: true, .. } if supervisor == TOP_SUPERVISOR => {
                return Some(self.end())
            }
            _ => {}
        }
        None
    }

    fn end(&self) -> RuntimeEnd {
        if self.top_gave_up {
            RuntimeEnd::DeviceGaveUp
        } else if self.top_auto_shutdown {
            let reason = self.root_exit.clone().unwrap_or(ExitReason::Normal);
            let child = self.root_gave_up_on.clone();
            RuntimeEnd::RootEnded { gave_up: child.is_some(), reason, child }
        } else {
            RuntimeEnd::Shutdown
        }
    }
}

/// Folds `events` (subscribed before the tree started) until `top` stops; the receiver holds the end.
pub(super) fn watch_end(
    mut events: mpsc::UnboundedReceiver<TreeEvent>,
    top: SupervisorRef,
    root_id: String,
) -> watch::Receiver<Option<RuntimeEnd>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut fold = Fold::new(root_id);
        // One wait for the whole watch (not a new one per event: a tree's start is an event per child).
        let stopped = top.wait();
        tokio::pin!(stopped);
        let end = loop {
            tokio::select! {
                // A closed channel disables this branch: the top's stop still ends the watch.
                Some(event) = events.recv() => {
                    if let Some(end) = fold.step(event) {
                        break end;
                    }
                }
                // Stopped without its last event (killed): what it emitted before is already queued.
                () = &mut stopped => {
                    let mut end = None;
                    while let (None, Ok(event)) = (&end, events.try_recv()) {
                        end = fold.step(event);
                    }
                    break end.unwrap_or_else(|| fold.end());
                }
            }
        };
        let _ = tx.send(Some(end));
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringvisor_supervisor::ChildType;

    fn stopped() -> TreeEvent {
        TreeEvent::SupervisorStopped { supervisor: TOP_SUPERVISOR.into(), reason: ExitReason::Shutdown, root: true }
    }

    fn exited(child: &str, reason: ExitReason) -> TreeEvent {
        let (supervisor, child_type) = (TOP_SUPERVISOR.into(), ChildType::Supervisor);
        TreeEvent::ChildExited { supervisor, child: child.into(), child_type, reason }
    }

    #[test]
    fn the_end_is_read_from_the_top_supervisors_events() {
        let run = |events: Vec<TreeEvent>| {
            let mut fold = Fold::new("root".into());
            events.into_iter().find_map(|e| fold.step(e))
        };
        assert_eq!(run(vec![exited("root", ExitReason::Shutdown), stopped()]), Some(RuntimeEnd::Shutdown));
        let gave_up = vec![
            TreeEvent::IntensityReached { supervisor: "root".into(), child: "worker".into() },
            exited("root", ExitReason::Shutdown),
            TreeEvent::AutoShutdown { supervisor: TOP_SUPERVISOR.into() },
            stopped(),
        ];
        let end = run(gave_up).expect("an end");
        let child = Some("worker".to_string());
        assert_eq!(end, RuntimeEnd::RootEnded { gave_up: true, reason: ExitReason::Shutdown, child });
        assert!(end.to_string().contains("by child `worker`"), "{end}");
        let reached =
            |supervisor: &str| TreeEvent::IntensityReached { supervisor: supervisor.into(), child: "c".into() };
        let device = vec![reached(TOP_SUPERVISOR), stopped()];
        assert_eq!(run(device), Some(RuntimeEnd::DeviceGaveUp));
        let nested = vec![reached("pool"), stopped()];
        assert_eq!(run(nested), Some(RuntimeEnd::Shutdown), "a nested supervisor's escalation is not the end");
        assert_eq!(run(vec![exited("root", ExitReason::Normal)]), None, "not over before the top stops");
    }
}
