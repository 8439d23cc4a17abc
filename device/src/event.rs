//! What the device tells the host: events, and the messages an event made undeliverable.

use crate::codes::DeviceCode;
pub use crate::codes::{CommandOp, EventKind, SlotState, UndeliveredReason};
use crate::layout::{RawEvent, RV_GRANTED_CMD, RV_OP_RESTART};
use crate::message::Envelope;

/// One event published by block 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    /// What happened.
    pub kind: EventKind,
    /// The slot (as given by the command for rejections: may be out of range).
    pub slot: u32,
    /// The slot's generation after the event.
    pub generation: u32,
    /// The slot's state after the event.
    pub state: SlotState,
    /// Failure or rejection code, if any.
    pub code: Option<DeviceCode>,
    /// The command that caused it (0: none).
    pub cmd_id: u64,
    /// Messages processed by the incarnation the event ends (Failed, Killed, Drained, and the host-made
    /// DeviceLost and Quarantined), or by the one before it (Created, Restarted, CreateFailed).
    pub messages_processed: u64,
    /// Kernel-to-kernel messages discarded by this transition.
    pub k2k_dropped: u32,
    /// Device clock at the event, nanoseconds.
    pub time_ns: u64,
    pub(crate) inbox_head: u32,
    pub(crate) failed_index: u32,
    /// The command op the event reports (Failed: `RV_OP_RESTART` when a restart by grant follows).
    pub(crate) op: u32,
}

impl DeviceEvent {
    /// A Failed event after which block 0 restarts the slot in place under the host's grant (the grant was
    /// in force when block 0 saw the failure).
    pub fn restart_by_grant_follows(&self) -> bool {
        self.kind == EventKind::Failed && self.op == RV_OP_RESTART
    }

    /// The event of a restart block 0 carried out under the host's grant (see [`Device::set_restart_grant`](crate::Device::set_restart_grant)).
    pub fn by_grant(&self) -> bool {
        self.cmd_id & RV_GRANTED_CMD != 0
    }

    pub(crate) fn from_raw(raw: &RawEvent) -> Self {
        Self {
            kind: EventKind::from_raw(raw.kind),
            slot: raw.slot,
            generation: raw.generation,
            state: SlotState::from_raw(raw.state),
            code: (raw.code != 0).then(|| DeviceCode::from_raw(raw.code)),
            cmd_id: raw.cmd_id,
            messages_processed: raw.messages_processed,
            k2k_dropped: raw.k2k_dropped,
            time_ns: raw.time_ns,
            inbox_head: raw.inbox_head,
            failed_index: raw.failed_index,
            op: raw.op,
        }
    }
}

/// A message the device did not process, handed back to the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undelivered {
    /// The slot it was sent to.
    pub slot: u32,
    /// The incarnation (generation) of the slot's actor it was sent to.
    pub generation: u32,
    /// The message, as it was written.
    pub envelope: Envelope,
    /// Why it was not processed.
    pub reason: UndeliveredReason,
}

/// A device event as the host delivers it: the event and the messages it made undeliverable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotEvent {
    /// The event.
    pub event: DeviceEvent,
    /// Messages this event made undeliverable (read back from the inbox).
    pub undelivered: Vec<Undelivered>,
}
