//! Whether the device answers, judged from block 0's heartbeat, and what happens when it stops for good: the
//! executor is stopped, what it published is read, what it had not consumed is handed back, and everything
//! still waiting fails. A shutdown ends the same way.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::poll::PollState;
use super::{Device, DeviceInner};
use crate::codes::{EventKind, UndeliveredReason};
use crate::error::DeviceError;
use crate::layout::RV_DEVICE_HALT;
use crate::sync::lock;

/// Whether the device is answering, judged from block 0's heartbeat (see [`Device::health`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceHealth {
    /// Block 0's heartbeat is moving.
    Running,
    /// Block 0's heartbeat has not moved for this long (a stalled executor); lost past
    /// [`DeviceConfig::lost_after`](crate::DeviceConfig#structfield.lost_after).
    Unresponsive(Duration),
    /// Declared lost: every operation fails with [`DeviceError::DeviceLost`].
    Lost,
}

/// Block 0's heartbeat stale this long: the device is reported [`DeviceHealth::Unresponsive`].
pub const UNRESPONSIVE_AFTER: Duration = Duration::from_millis(250);
/// How often the poller looks at block 0's heartbeat.
pub(super) const HEARTBEAT_CHECK_EVERY: Duration = Duration::from_millis(5);

impl Device {
    /// Whether the device answers: block 0's heartbeat, as the poller last saw it. A heartbeat stale past
    /// [`DeviceConfig::lost_after`](crate::DeviceConfig#structfield.lost_after) makes the poller declare the
    /// device lost: what it had not processed is handed back (a [`EventKind::DeviceLost`] event per slot,
    /// reason [`UndeliveredReason::DeviceLost`]), waiting calls and commands fail with
    /// [`DeviceError::DeviceLost`], and so does every later operation.
    /// A lost device is not reopened in place: open a new one (the runtime does, see `ringvisor::Runtime`).
    pub fn health(&self) -> DeviceHealth {
        self.inner.health()
    }

    /// How long since block 0's heartbeat was last seen moving (the poller looks every few milliseconds; an
    /// idle CPU backend beats at least every `park_max`). Long for every slot at once = the executor stalls.
    pub fn heartbeat_age(&self) -> Duration {
        self.inner.heartbeat_age()
    }

    /// Why the device was declared lost (block 0's heartbeat stale for how long, or the executor's own report,
    /// such as a kernel fault with the driver's error); `None` while it is not lost.
    pub fn loss_cause(&self) -> Option<String> {
        lock(&self.inner.loss_cause).clone()
    }

    /// Declares the device lost now, for `cause` (what [`Device::loss_cause`] then says): as when block 0
    /// stops answering, the executor is stopped, what it published is read, every message it had not
    /// consumed is handed back (a [`EventKind::DeviceLost`] event per slot, reason
    /// [`UndeliveredReason::DeviceLost`]) and everything still waiting fails with [`DeviceError::DeviceLost`].
    /// For a device its owner gives up on while it still answers (too many quarantined slots). A device
    /// already lost or shut down is left as it is.
    pub fn retire(&self, cause: impl Into<String>) {
        let mut st = self.inner.poll.lock();
        self.inner.declare_lost(&mut st, cause.into());
    }

    /// Stops the executor and the poller. Messages the device had not consumed are handed back (an
    /// [`EventKind::DeviceStopped`] event per slot, reason [`UndeliveredReason::LeftInInbox`]); commands and
    /// calls still waiting then resolve with [`DeviceError::Closed`]; streams close. Idempotent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl DeviceInner {
    pub(super) fn heartbeat_age(&self) -> Duration {
        let seen = Duration::from_nanos(self.last_beat_ns.load(Ordering::Acquire));
        self.opened.elapsed().saturating_sub(seen)
    }

    pub(super) fn health(&self) -> DeviceHealth {
        if self.lost.load(Ordering::Acquire) {
            return DeviceHealth::Lost;
        }
        let stale = self.heartbeat_age();
        if stale >= UNRESPONSIVE_AFTER {
            DeviceHealth::Unresponsive(stale)
        } else {
            DeviceHealth::Running
        }
    }

    /// Called by the poller after each poll: follows block 0's heartbeat and declares the device lost when
    /// it has been stale for `lost_after`. Returns true if it did.
    pub(super) fn watch_heartbeat(&self, st: &mut PollState) -> bool {
        // Block 0 writes its heartbeat line all the time: reading it on every poll would bounce that line
        // between the poller's core and block 0's. Every few milliseconds is plenty for a bound in seconds.
        let now = self.opened.elapsed();
        if now < st.next_beat_check {
            return false;
        }
        st.next_beat_check = now + HEARTBEAT_CHECK_EVERY;
        self.executor.tend();
        if let Some(failure) = self.executor.failure() {
            self.declare_lost(st, format!("the executor failed: {failure}"));
            return true;
        }
        // Alive: block 0 beat, carried out a command or published an event since the last look, or the executor
        // is paused on purpose (its heartbeat stands still while another device of the GPU loads its module).
        let progress = self.grid.block0_counters();
        if progress != st.progress || self.executor.paused() {
            st.progress = progress;
            self.last_beat_ns.store(now.as_nanos() as u64, Ordering::Release);
            return false;
        }
        let stale = now.saturating_sub(Duration::from_nanos(self.last_beat_ns.load(Ordering::Acquire)));
        match self.lost_after {
            Some(limit) if stale >= limit => {
                self.declare_lost(st, format!("block 0's heartbeat stopped {stale:?} ago"));
                true
            }
            _ => {
                if stale >= UNRESPONSIVE_AFTER {
                    self.executor.wake(); // a parked executor would have beaten by now: make sure it is awake
                }
                false
            }
        }
    }

    /// The device stopped answering (`cause` says how): stop it, read what it did publish, hand back what it had
    /// not processed, and fail everything still waiting with [`DeviceError::DeviceLost`].
    pub(super) fn declare_lost(&self, st: &mut PollState, cause: String) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(%cause, "device lost");
        *lock(&self.loss_cause) = Some(cause);
        self.lost.store(true, Ordering::Release);
        self.grid.write_device_faults(RV_DEVICE_HALT);
        self.stop_executor(st, EventKind::DeviceLost, UndeliveredReason::DeviceLost, DeviceError::DeviceLost);
    }

    /// Stops the executor, reads what it published before it stopped, hands back what it had not consumed
    /// (as host-made `kind` events, with `reason`), then fails everything still waiting with `error`.
    pub(super) fn stop_executor(
        &self,
        st: &mut PollState,
        kind: EventKind,
        reason: UndeliveredReason,
        error: DeviceError,
    ) {
        self.grid.request_terminate();
        self.executor.shutdown();
        self.poll_once(st);
        self.hand_back_all_queues(kind, reason);
        self.close_waiters(error);
    }

    pub(super) fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = self.poll.lock();
        self.stop_executor(&mut st, EventKind::DeviceStopped, UndeliveredReason::LeftInInbox, DeviceError::Closed);
        tracing::info!("device shut down");
    }

    /// Fails every waiting command and call with `error` and closes every stream.
    pub(super) fn close_waiters(&self, error: DeviceError) {
        self.poller_bell.wake();
        for (_, w) in lock(&self.commands).drain() {
            w.complete(Err(error.clone()));
        }
        let waiting = self.calls.lock().close(error.clone());
        for w in waiting {
            w.complete(Err(error.clone()));
        }
        self.close_subscribers();
    }
}
