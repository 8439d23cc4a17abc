//! What the host can read about a device at any time: a slot's control block, and device-wide counters.

use std::sync::atomic::Ordering;

use super::Device;
use crate::behaviour::BehaviourId;
use crate::codes::{DeviceCode, SlotState};
use crate::error::DeviceError;

/// A copy of a slot's control block, read field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotSnapshot {
    /// Lifecycle state.
    pub state: SlotState,
    /// Incarnation number (bumped by every (re)creation).
    pub generation: u32,
    /// Bumped by every step that was not stalled.
    pub heartbeat: u64,
    /// Messages processed by this incarnation.
    pub messages_processed: u64,
    /// The failure code, if the slot failed.
    pub last_error: Option<DeviceCode>,
    /// Behaviour id.
    pub behaviour: BehaviourId,
    /// Device inbox head (consumed) and host inbox tail (written).
    pub inbox: (u32, u32),
    /// Host outbox head (released to the device: read, but for up to an eighth of the outbox a caller read
    /// its own reply from and has not released yet) and device outbox tail (written).
    pub outbox: (u32, u32),
    /// Kernel-to-kernel messages sent, received, dropped (dropped: over the slot's lifetime).
    pub k2k: (u32, u32, u32),
    /// Malformed envelopes answered with an error by this incarnation.
    pub bad_envelopes: u32,
    /// Hybrid logical clock.
    pub hlc: u64,
}

/// What a monitor reads of a slot every second: one line of its control block (a [`SlotSnapshot`] reads all
/// four).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotActivity {
    /// Incarnation number.
    pub generation: u32,
    /// Bumped by every step that was not stalled.
    pub heartbeat: u64,
    /// Messages processed by this incarnation.
    pub messages_processed: u64,
}

/// Device-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Messages written into inboxes (routed kernel-to-kernel messages included).
    pub messages_sent: u64,
    /// Replies read from outboxes (including error replies).
    pub replies: u64,
    /// Error replies among them.
    pub error_replies: u64,
    /// Messages handed back: still queued at a kill or restart.
    pub undelivered_left_in_inbox: u64,
    /// Messages handed back: being processed when the actor crashed.
    pub undelivered_in_flight: u64,
    /// Events read from the event ring.
    pub events: u64,
    /// Block 0's heartbeat (it moves while block 0 runs: see [`Device::heartbeat_age`]).
    pub block0_heartbeat: u64,
    /// Commands block 0 processed.
    pub commands_processed: u64,
    /// Routed kernel-to-kernel messages read from this device's outboxes and delivered to their target's inbox.
    pub routed_out: u64,
    /// Routed kernel-to-kernel messages written into this device's inboxes (counted in `messages_sent` too).
    pub routed_in: u64,
    /// Routed messages read from this device's outboxes and not delivered (reported to the router's hook).
    pub unroutable: u64,
}

impl Device {
    /// Reads `slot`'s control block, one field at a time.
    pub fn snapshot(&self, slot: u32) -> Result<SlotSnapshot, DeviceError> {
        self.check_slot(slot)?;
        let b = self.inner.grid.snapshot(slot);
        Ok(SlotSnapshot {
            state: SlotState::from_raw(b.state),
            generation: b.generation,
            heartbeat: b.heartbeat,
            messages_processed: b.messages_processed,
            last_error: (b.last_error != 0).then(|| DeviceCode::from_raw(b.last_error)),
            behaviour: BehaviourId(b.behaviour),
            inbox: (b.inbox_head, b.inbox_tail),
            outbox: (b.outbox_head, b.outbox_tail),
            k2k: (b.k2k_sent, b.k2k_received, b.k2k_dropped),
            bad_envelopes: b.bad_envelopes,
            hlc: b.hlc,
        })
    }

    /// `slot`'s generation, heartbeat and messages processed: three loads from one line, for monitors that
    /// sample many slots.
    pub fn activity(&self, slot: u32) -> Result<SlotActivity, DeviceError> {
        self.check_slot(slot)?;
        let (generation, heartbeat, messages_processed) = self.inner.grid.activity(slot);
        Ok(SlotActivity { generation, heartbeat, messages_processed })
    }

    /// Messages waiting in `slot`'s inbox (published by the host, not yet consumed by the actor): two loads,
    /// for watchdogs that look at many slots.
    pub fn inbox_pending(&self, slot: u32) -> Result<u32, DeviceError> {
        self.check_slot(slot)?;
        Ok(self.inner.grid.inbox_pending(slot))
    }

    /// The device's own generation and state of `slot` (which events may not have told the host yet): one
    /// line of the control block.
    pub fn lifecycle(&self, slot: u32) -> Result<(u32, SlotState), DeviceError> {
        self.check_slot(slot)?;
        let (state, generation) = self.inner.grid.lifecycle(slot);
        Ok((generation, SlotState::from_raw(state)))
    }

    /// The generation and state of `slot` as the host last learned them from events.
    pub fn host_view(&self, slot: u32) -> Result<(u32, SlotState), DeviceError> {
        self.check_slot(slot)?;
        let host = self.inner.slots[slot as usize].lock();
        Ok((host.generation, host.state))
    }

    /// Device-wide counters (takes each slot's lock once: the sent count is kept per slot).
    pub fn stats(&self) -> DeviceStats {
        let c = &self.inner.counters;
        let (hb, cmds, _) = self.inner.grid.block0_counters();
        DeviceStats {
            messages_sent: self.inner.slots.iter().map(|s| s.lock().sent).sum(),
            replies: c.replies.load(Ordering::Relaxed),
            error_replies: c.error_replies.load(Ordering::Relaxed),
            undelivered_left_in_inbox: c.left_in_inbox.load(Ordering::Relaxed),
            undelivered_in_flight: c.in_flight.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            block0_heartbeat: hb,
            commands_processed: cmds,
            routed_out: c.routed_out.load(Ordering::Relaxed),
            routed_in: c.routed_in.load(Ordering::Relaxed),
            unroutable: c.unroutable.load(Ordering::Relaxed),
        }
    }
}
