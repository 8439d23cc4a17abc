//! Errors of the device layer.

pub use crate::codes::DeviceCode;
use crate::codes::{SlotState, UndeliveredReason};

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
    /// The behaviour declares more state than the device's state regions hold (checked on the host; nothing
    /// was written).
    #[error(
        "behaviour `{behaviour}` needs {needs} bytes of state; this device's state regions are {has} bytes \
         (DeviceConfig::state_bytes)"
    )]
    StateTooSmall {
        /// The behaviour.
        behaviour: String,
        /// Bytes it declares.
        needs: u32,
        /// Bytes of a state region on this device.
        has: u32,
    },
    /// A state read asks for more bytes than one reply carries (checked on the host; nothing was sent).
    #[error(
        "reading {len} bytes of state needs replies of that size; this device's largest reply is {max} bytes \
         (raise DeviceConfig::bulk_bytes, or declare the behaviour's state size so only that much is read)"
    )]
    StateTooLargeToRead {
        /// Bytes the read asks for.
        len: usize,
        /// Bytes one reply carries on this device ([`crate::Device::max_payload`]).
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
    #[error("message to slot {slot} (generation {generation}) was not delivered: {reason:?}")]
    Undelivered {
        /// The slot.
        slot: u32,
        /// The incarnation it was sent to.
        generation: u32,
        /// Why.
        reason: UndeliveredReason,
    },
    /// A kernel-to-kernel message to an actor on another device (a routed address) could not be delivered; the
    /// call it answered (`rv_forward`) ends with this error, and the message is reported to the router's hook.
    #[error("routed message to slot {slot} of device {device} was not delivered: {reason}")]
    Unroutable {
        /// The target's device index.
        device: u32,
        /// The target's slot.
        slot: u32,
        /// Why.
        reason: crate::codes::UnroutableReason,
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
