//! The device's vocabulary as the host names it: failure codes, slot states, event kinds, command opcodes,
//! why a message was handed back, and why a routed message was not delivered. Each decodes a raw value of `kernels/rv_layout.h`; nothing here depends
//! on another module of this crate but the layout mirror.

use crate::layout::*;

/// A failure code reported by the device (rejections, actor failures, error replies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceCode {
    /// The slot index is outside the grid.
    SlotOutOfRange,
    /// No behaviour is registered under that id.
    UnknownBehaviour,
    /// The command is not legal in the slot's current state.
    IllegalTransition,
    /// The command named a generation the slot no longer has.
    StaleGeneration,
    /// Block 0 is still waiting for the actor to acknowledge an earlier command.
    Busy,
    /// A malformed command (unknown op, init bytes too long, impossible index).
    BadCommand,
    /// A malformed envelope (wrong kind, destination or length).
    BadEnvelope,
    /// A payload larger than an envelope holds.
    PayloadTooLarge,
    /// A per-message limit was exceeded (replies, sends).
    Limit,
    /// A kernel-to-kernel inbox was full.
    K2kFull,
    /// The operation is not allowed here (for example: replying during init).
    NotAllowed,
    /// A failure injected through the control block's fault bits.
    Injected,
    /// The test behaviour received its poison payload.
    Poison,
    /// A kernel-to-kernel message's target is not running, or discarded it when it was killed or restarted.
    TargetGone,
    /// No room in the outbox's bulk area for a large reply now (the behaviour may return `RV_STALL`).
    OutboxFull,
    /// A behaviour's own failure code (>= 1000).
    User(i32),
    /// A code this version does not know.
    Other(i32),
}

impl DeviceCode {
    /// Decodes a device result code.
    pub fn from_raw(code: i32) -> Self {
        match code {
            RV_ERR_SLOT_RANGE => Self::SlotOutOfRange,
            RV_ERR_UNKNOWN_BEHAVIOUR => Self::UnknownBehaviour,
            RV_ERR_ILLEGAL_TRANSITION => Self::IllegalTransition,
            RV_ERR_STALE_GENERATION => Self::StaleGeneration,
            RV_ERR_BUSY => Self::Busy,
            RV_ERR_BAD_COMMAND => Self::BadCommand,
            RV_ERR_BAD_ENVELOPE => Self::BadEnvelope,
            RV_ERR_PAYLOAD_TOO_LARGE => Self::PayloadTooLarge,
            RV_ERR_LIMIT => Self::Limit,
            RV_ERR_K2K_FULL => Self::K2kFull,
            RV_ERR_NOT_ALLOWED => Self::NotAllowed,
            RV_ERR_INJECTED => Self::Injected,
            RV_ERR_POISON => Self::Poison,
            RV_ERR_TARGET_GONE => Self::TargetGone,
            RV_ERR_OUTBOX_FULL => Self::OutboxFull,
            c if c >= RV_ERR_USER_BASE => Self::User(c),
            c => Self::Other(c),
        }
    }

    /// The raw device code.
    pub fn raw(self) -> i32 {
        match self {
            Self::SlotOutOfRange => RV_ERR_SLOT_RANGE,
            Self::UnknownBehaviour => RV_ERR_UNKNOWN_BEHAVIOUR,
            Self::IllegalTransition => RV_ERR_ILLEGAL_TRANSITION,
            Self::StaleGeneration => RV_ERR_STALE_GENERATION,
            Self::Busy => RV_ERR_BUSY,
            Self::BadCommand => RV_ERR_BAD_COMMAND,
            Self::BadEnvelope => RV_ERR_BAD_ENVELOPE,
            Self::PayloadTooLarge => RV_ERR_PAYLOAD_TOO_LARGE,
            Self::Limit => RV_ERR_LIMIT,
            Self::K2kFull => RV_ERR_K2K_FULL,
            Self::NotAllowed => RV_ERR_NOT_ALLOWED,
            Self::Injected => RV_ERR_INJECTED,
            Self::Poison => RV_ERR_POISON,
            Self::TargetGone => RV_ERR_TARGET_GONE,
            Self::OutboxFull => RV_ERR_OUTBOX_FULL,
            Self::User(c) | Self::Other(c) => c,
        }
    }
}

impl std::fmt::Display for DeviceCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?} (code {})", self.raw())
    }
}

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

/// Why a routed message was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnroutableReason {
    /// The sender's device is not attached to a router (a device used on its own).
    NoRouter,
    /// No device is attached at the address's device index.
    NoDevice,
    /// The device has no such slot.
    NoSlot,
    /// The target slot is not running an actor that takes messages (dormant, stopped, failed, quarantined).
    NotRunning,
    /// The target's device is lost or shut down.
    DeviceGone,
    /// The target's inbox stayed full past the router's hold limit (or the sender's device shut down meanwhile).
    InboxFull,
    /// The device published a routed envelope no device code makes (a payload over one envelope): not
    /// delivered, so the receiver never reads it.
    Malformed,
}

impl UnroutableReason {
    /// Short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::NoRouter => "no_router",
            Self::NoDevice => "no_device",
            Self::NoSlot => "no_slot",
            Self::NotRunning => "not_running",
            Self::DeviceGone => "device_gone",
            Self::InboxFull => "inbox_full",
            Self::Malformed => "malformed",
        }
    }
}

impl std::fmt::Display for UnroutableReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}
