//! Errors of the device layer.

use crate::event::SlotState;
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
            Self::User(c) | Self::Other(c) => c,
        }
    }
}

impl std::fmt::Display for DeviceCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?} (code {})", self.raw())
    }
}

/// Errors returned by [`crate::Device`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DeviceError {
    /// The configuration is invalid; nothing was allocated.
    #[error("invalid device configuration: {0}")]
    InvalidConfig(String),
    /// The slot index is outside the grid (checked on the host; nothing was written).
    #[error("slot {slot} is out of range (the device has {slot_count} slots)")]
    SlotOutOfRange {
        /// The slot asked for.
        slot: u32,
        /// Slots on this device.
        slot_count: u32,
    },
    /// No behaviour with that name or id is registered (checked on the host).
    #[error("unknown behaviour {0}")]
    UnknownBehaviour(String),
    /// The payload or init bytes do not fit (checked on the host; nothing was written).
    #[error("payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge {
        /// Bytes given.
        len: usize,
        /// Bytes an envelope or command holds.
        max: usize,
    },
    /// The slot's inbox stayed full until the deadline; the message was not written.
    #[error("inbox of slot {slot} is full")]
    InboxFull {
        /// The slot.
        slot: u32,
    },
    /// The command ring stayed full until the deadline; the command was not written.
    #[error("command ring is full")]
    CommandRingFull,
    /// The slot does not accept messages now (no incarnation, or being killed or drained).
    #[error("slot {slot} does not accept messages in state {state:?}")]
    NotAccepting {
        /// The slot.
        slot: u32,
        /// Its state as the host last saw it.
        state: SlotState,
    },
    /// A command for this slot is still in flight; wait for its outcome first.
    #[error("slot {slot} already has a command in flight")]
    CommandInFlight {
        /// The slot.
        slot: u32,
    },
    /// The device rejected the command; nothing changed.
    #[error("device rejected the command for slot {slot}: {code}")]
    Rejected {
        /// The slot named by the command.
        slot: u32,
        /// Why.
        code: DeviceCode,
    },
    /// The behaviour's init failed: the slot is now Failed.
    #[error("init of slot {slot} failed: {code}")]
    CreateFailed {
        /// The slot.
        slot: u32,
        /// The behaviour's failure code.
        code: DeviceCode,
    },
    /// The device answered a message with an error.
    #[error("device answered with an error: {code} (detail {detail})")]
    ErrorReply {
        /// Why.
        code: DeviceCode,
        /// Code-specific detail.
        detail: u32,
    },
    /// The message was handed back undelivered (its actor was killed, restarted, or crashed on it).
    #[error("message to slot {slot} was not delivered: {reason:?}")]
    Undelivered {
        /// The slot.
        slot: u32,
        /// Why.
        reason: crate::event::UndeliveredReason,
    },
    /// No answer before the deadline.
    #[error("timed out")]
    Timeout,
    /// The device was shut down.
    #[error("device is shut down")]
    Closed,
    /// The device stopped answering (block 0's heartbeat stale past `DeviceConfig::lost_after`, or an
    /// injected halt): every operation fails with this error until the device is opened again.
    #[error("device lost: the persistent kernel stopped answering")]
    DeviceLost,
    /// The slot is quarantined (its actor never acknowledged a kill): it is not used again on this device.
    #[error("slot {slot} is quarantined until the device restarts")]
    Quarantined {
        /// The slot.
        slot: u32,
    },
    /// The requested backend cannot run here (for example: no CUDA driver).
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    /// A typed payload could not be encoded or decoded.
    #[error("payload codec: {0}")]
    Codec(String),
}
