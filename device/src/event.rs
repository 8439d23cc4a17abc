//! What the device tells the host: slot states, events, and messages it could not deliver.

use crate::error::DeviceCode;
use crate::layout::*;
use crate::message::Envelope;

/// Lifecycle state of a slot (`Dormant -> Initializing -> Active <-> Draining -> Terminated`, and `Failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotState {
    /// Never created.
    Dormant,
    /// Being created by block 0 (transient).
    Initializing,
    /// Processing messages.
    Active,
    /// Finishing the messages it had, then Terminated.
    Draining,
    /// Stopped (killed or drained).
    Terminated,
    /// The behaviour reported a failure.
    Failed,
}

impl SlotState {
    /// Decodes a raw state; unknown values map to `Failed`.
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            RV_STATE_DORMANT => Self::Dormant,
            RV_STATE_INITIALIZING => Self::Initializing,
            RV_STATE_ACTIVE => Self::Active,
            RV_STATE_DRAINING => Self::Draining,
            RV_STATE_TERMINATED => Self::Terminated,
            _ => Self::Failed,
        }
    }
}

/// Kind of a device event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Slot created and Active.
    Created,
    /// The behaviour's init failed; the slot is Failed.
    CreateFailed,
    /// Slot Terminated by Kill.
    Killed,
    /// Slot re-created (new generation) and Active.
    Restarted,
    /// Slot Draining.
    Draining,
    /// Drain finished; slot Terminated.
    Drained,
    /// Slot Active again after a drain was cancelled.
    Resumed,
    /// The actor failed; slot Failed.
    Failed,
    /// A command was rejected; nothing changed.
    Rejected,
    /// Host-made: the device was lost; the slot's queued messages are handed back (see
    /// [`crate::Device::health`]).
    DeviceLost,
    /// Host-made: the device was shut down; the slot's queued messages are handed back.
    DeviceStopped,
    /// Host-made: the slot was quarantined (see [`crate::Device::quarantine`]); its queued messages are
    /// handed back.
    Quarantined,
    /// An event kind this version does not know.
    Unknown(u32),
}

impl EventKind {
    /// Decodes a raw event kind.
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            RV_EVT_CREATED => Self::Created,
            RV_EVT_CREATE_FAILED => Self::CreateFailed,
            RV_EVT_KILLED => Self::Killed,
            RV_EVT_RESTARTED => Self::Restarted,
            RV_EVT_DRAINING => Self::Draining,
            RV_EVT_DRAINED => Self::Drained,
            RV_EVT_RESUMED => Self::Resumed,
            RV_EVT_FAILED => Self::Failed,
            RV_EVT_REJECTED => Self::Rejected,
            other => Self::Unknown(other),
        }
    }
}

/// Command opcodes, as the host names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommandOp {
    /// Create an actor in a Dormant or Terminated slot.
    Create,
    /// Terminate a running or failed actor.
    Kill,
    /// Kill (if running) and create again, with a new generation.
    Restart,
    /// Finish the queued messages, then terminate.
    Drain,
    /// Cancel a drain.
    Resume,
}

impl CommandOp {
    /// The raw opcode.
    pub fn raw(self) -> u32 {
        match self {
            Self::Create => RV_OP_CREATE,
            Self::Kill => RV_OP_KILL,
            Self::Restart => RV_OP_RESTART,
            Self::Drain => RV_OP_DRAIN,
            Self::Resume => RV_OP_RESUME,
        }
    }
}

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
}

impl DeviceEvent {
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
        }
    }
}

/// Why a message handed to the device was not processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UndeliveredReason {
    /// It was still queued when its actor was killed or restarted.
    LeftInInbox,
    /// The actor failed while processing it (a possible poison message).
    InFlightAtCrash,
    /// Still queued (or unanswered) when the device was lost.
    DeviceLost,
    /// Still queued when its slot was quarantined.
    Quarantined,
}

/// A message the device did not process, handed back to the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undelivered {
    /// The slot it was sent to.
    pub slot: u32,
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
