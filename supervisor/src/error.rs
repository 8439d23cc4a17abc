//! Errors of the supervision layer.

use ringvisor_device::DeviceError;

use crate::dead_letter::DeadLetterReason;
use crate::status::ChildStatus;

/// Errors of supervisor operations; the admin ones are OTP's (`already_started`, `already_present`,
/// `running`, `restarting`, `not_found`).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SupervisorError {
    /// `start_child`: a child with this id is running.
    #[error("child `{0}` is already started")]
    AlreadyStarted(String),
    /// `start_child`: a child with this id exists (not running).
    #[error("child `{0}` is already present")]
    AlreadyPresent(String),
    /// `restart_child` / `delete_child`: the child is running.
    #[error("child `{0}` is running")]
    Running(String),
    /// `restart_child` / `delete_child`: the child is being restarted.
    #[error("child `{0}` is restarting")]
    Restarting(String),
    /// No child with this id.
    #[error("no child `{0}`")]
    NotFound(String),
    /// The child could not be started.
    #[error("child `{id}` failed to start: {reason}")]
    StartFailed {
        /// The child.
        id: String,
        /// Why.
        reason: String,
    },
    /// The operation does not apply to this supervisor's strategy (for example `restart_child` on a
    /// `simple_one_for_one` supervisor, or a dynamic start on any other).
    #[error("not supported by a {0} supervisor")]
    WrongStrategy(&'static str),
    /// The supervisor is not running.
    #[error("the supervisor is not running")]
    NoProc,
    /// The supervisor did not answer in time.
    #[error("the supervisor did not answer within the timeout")]
    Timeout,
    /// A specification is invalid (every problem, with its path).
    #[error("invalid supervision spec: {0}")]
    InvalidSpec(String),
    /// A GPU child was asked for but the runtime has no device, or it has no free slot.
    #[error("no device slot: {0}")]
    NoSlot(String),
    /// A registry name is taken or invalid.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

impl SupervisorError {
    /// A start failure reported up through the supervisors `through` (outermost first: each one's reason is
    /// the next one's failure), as the failure of the child below them; any other error unchanged. The
    /// runtime uses it so that a start error names the user's child, not its own supervisors.
    pub fn below(self, through: &[&str]) -> Self {
        let mut err = self;
        for supervisor in through {
            match err {
                SupervisorError::StartFailed { id, reason } if id == *supervisor => match parse_start_failed(&reason) {
                    Some(inner) => err = inner,
                    None => return SupervisorError::StartFailed { id, reason },
                },
                other => return other,
            }
        }
        err
    }
}

/// The inverse of `StartFailed`'s message (which a supervisor that fails its own start also exits with).
fn parse_start_failed(text: &str) -> Option<SupervisorError> {
    let rest = text.strip_prefix("child `")?;
    let (id, reason) = rest.split_once("` failed to start: ")?;
    Some(SupervisorError::StartFailed { id: id.to_string(), reason: reason.to_string() })
}

/// Errors of sending through a stable handle.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The child has ended for good (the message is in the dead-letter queue).
    #[error("`{actor}` is {}: the message went to the dead-letter queue", status.label())]
    Gone {
        /// The actor: its registry name, or its child id.
        actor: String,
        /// Its status.
        status: ChildStatus,
    },
    /// The device handed the message back: the actor crashed on it, was killed or restarted with it queued,
    /// its device was lost or its slot quarantined. The message is in the dead-letter queue with the same
    /// reason.
    #[error(
        "message to `{actor}` (slot {slot}, generation {generation}) was not delivered: {}",
        reason.explain()
    )]
    Undelivered {
        /// The actor: its registry name, or its child id.
        actor: String,
        /// Its device slot.
        slot: u32,
        /// The incarnation it was sent to.
        generation: u32,
        /// Why, in the dead-letter queue's words.
        reason: DeadLetterReason,
    },
    /// The inbox stayed full (the message is in the dead-letter queue).
    #[error("the actor's inbox is full: the message went to the dead-letter queue")]
    InboxFull,
    /// No reply within the timeout.
    #[error("no reply within the timeout")]
    Timeout,
    /// The payload is larger than the device takes (one envelope's 96 bytes, or `DeviceConfig::bulk_bytes`).
    #[error("payload of {len} bytes exceeds the device's {max}-byte limit{}", bulk_hint(*max))]
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// No actor is registered under the name (the message is in the dead-letter queue).
    #[error("no actor named `{0}`: the message went to the dead-letter queue")]
    UnknownTarget(String),
    /// The device refused or failed the operation.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The error another process returned for the same call or send (a mirrored GPU actor reached through
    /// ractor_cluster, see [`GpuMessage`](crate::GpuMessage)): the kind of its variant there (as
    /// [`SendError::kind`]) and its message.
    #[error("{message} (on another node)")]
    Remote {
        /// The variant's kind on the node that answered (`timeout`, `gone`, ...).
        kind: String,
        /// Its message, as that node wrote it.
        message: String,
    },
}

impl SendError {
    /// The variant's name in snake_case (`gone`, `undelivered`, `inbox_full`, `timeout`, `payload_too_large`,
    /// `unknown_target`, `device`), or for [`SendError::Remote`] the kind the other node reported: what
    /// crosses a process boundary with the message.
    pub fn kind(&self) -> &str {
        match self {
            SendError::Gone { .. } => "gone",
            SendError::Undelivered { .. } => "undelivered",
            SendError::InboxFull => "inbox_full",
            SendError::Timeout => "timeout",
            SendError::PayloadTooLarge { .. } => "payload_too_large",
            SendError::UnknownTarget(_) => "unknown_target",
            SendError::Device(_) => "device",
            SendError::Remote { kind, .. } => kind,
        }
    }
}

/// Errors of the registry.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The name is not valid (the message says why).
    #[error("invalid name `{name}`: {why}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// The pattern is not valid (the message says why).
    #[error("invalid pattern `{pattern}`: {why}")]
    InvalidPattern {
        /// The pattern.
        pattern: String,
        /// Why.
        why: &'static str,
    },
    /// Another child holds the name.
    #[error("name `{0}` is already bound to another actor")]
    Taken(String),
}

/// What a payload-size error adds when the device has no bulk areas (its limit is one envelope).
fn bulk_hint(max: usize) -> &'static str {
    if max <= ringvisor_device::PAYLOAD_BYTES {
        " (set DeviceConfig::bulk_bytes for larger messages)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_failure_is_named_below_the_given_supervisors() {
        let failed = |id: &str, reason: &str| SupervisorError::StartFailed { id: id.into(), reason: reason.into() };
        let nested = failed("top", &failed("root", &failed("c", "device said no: `x`").to_string()).to_string());
        assert_eq!(nested.clone().below(&["top", "root"]), failed("c", "device said no: `x`"));
        assert_eq!(nested.clone().below(&["top"]), failed("root", &failed("c", "device said no: `x`").to_string()));
        assert_eq!(nested.clone().below(&["other"]), nested, "not through those supervisors: unchanged");
        assert_eq!(failed("top", "spawn failed").below(&["top", "root"]), failed("top", "spawn failed"));
        assert_eq!(SupervisorError::NoProc.below(&["top"]), SupervisorError::NoProc);
    }
}
