//! Exit reasons, as OTP classifies them, and their mapping onto ractor's stop reasons.

use std::fmt;

use ractor::SupervisionEvent;

/// Why a child (or a supervisor) stopped. The classification decides restarts exactly as in OTP: only
/// [`ExitReason::Normal`], [`ExitReason::Shutdown`] and [`ExitReason::ShutdownWith`] are clean exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitReason {
    /// The child finished its work (OTP `normal`).
    Normal,
    /// The child was told to stop (OTP `shutdown`).
    Shutdown,
    /// A shutdown with a tag (OTP `{shutdown, Tag}`).
    ShutdownWith(String),
    /// The child was killed without cleanup (OTP `killed`).
    Killed,
    /// Anything else: a crash, a device failure, an error (OTP: any other reason).
    Abnormal(String),
}

/// Stop reason strings understood by [`ExitReason::from_stop_reason`]; a ractor actor that calls
/// `myself.stop(Some(..))` with one of these exits with the matching reason.
pub mod stop_reason {
    /// `normal` (also what `stop(None)` means).
    pub const NORMAL: &str = "normal";
    /// `shutdown`.
    pub const SHUTDOWN: &str = "shutdown";
    /// Prefix of `shutdown:<tag>`, i.e. `{shutdown, Tag}`.
    pub const SHUTDOWN_PREFIX: &str = "shutdown:";
    /// `killed` (what ractor reports for a kill).
    pub const KILLED: &str = "killed";
    /// `device_lost`: the abnormal exit of a GPU child whose device was lost (one of several devices).
    pub const DEVICE_LOST: &str = "device_lost";
}

impl ExitReason {
    /// True for the reasons after which a transient child is not restarted.
    pub fn is_clean(&self) -> bool {
        matches!(self, Self::Normal | Self::Shutdown | Self::ShutdownWith(_))
    }

    /// The short label used in traces and metrics: `normal`, `shutdown`, `shutdown_tag`, `killed`, `abnormal`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Shutdown => "shutdown",
            Self::ShutdownWith(_) => "shutdown_tag",
            Self::Killed => "killed",
            Self::Abnormal(_) => "abnormal",
        }
    }

    /// The string to pass to ractor's `stop` to exit with this reason.
    pub fn to_stop_reason(&self) -> String {
        match self {
            Self::Normal => stop_reason::NORMAL.to_string(),
            Self::Shutdown => stop_reason::SHUTDOWN.to_string(),
            Self::ShutdownWith(tag) => format!("{}{tag}", stop_reason::SHUTDOWN_PREFIX),
            Self::Killed => stop_reason::KILLED.to_string(),
            Self::Abnormal(why) => why.clone(),
        }
    }

    /// Classifies a ractor stop reason (`None` is a normal exit).
    pub fn from_stop_reason(reason: Option<&str>) -> Self {
        match reason {
            None | Some(stop_reason::NORMAL) => Self::Normal,
            Some(stop_reason::SHUTDOWN) => Self::Shutdown,
            // ractor reports a kill as "killed"; a cancelled actor task is a kill too.
            Some(stop_reason::KILLED) | Some("actor_task_cancelled") => Self::Killed,
            Some(r) => match r.strip_prefix(stop_reason::SHUTDOWN_PREFIX) {
                Some(tag) => Self::ShutdownWith(tag.to_string()),
                None => Self::Abnormal(r.to_string()),
            },
        }
    }

    /// The exit a ractor supervision event reports, with the actor it concerns; `None` for events that
    /// are not exits.
    pub(crate) fn from_event(event: &SupervisionEvent) -> Option<(ractor::ActorId, ExitReason)> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                Some((cell.get_id(), Self::from_stop_reason(reason.as_deref())))
            }
            SupervisionEvent::ActorFailed(cell, err) => Some((cell.get_id(), Self::Abnormal(err.to_string()))),
            _ => None,
        }
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShutdownWith(tag) => write!(f, "shutdown ({tag})"),
            Self::Abnormal(why) => write!(f, "abnormal: {why}"),
            other => f.write_str(other.label()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_round_trip() {
        for r in [
            ExitReason::Normal,
            ExitReason::Shutdown,
            ExitReason::ShutdownWith("tag".into()),
            ExitReason::Killed,
            ExitReason::Abnormal("boom".into()),
        ] {
            assert_eq!(ExitReason::from_stop_reason(Some(&r.to_stop_reason())), r);
        }
        assert_eq!(ExitReason::from_stop_reason(None), ExitReason::Normal);
    }

    #[test]
    fn only_normal_and_shutdowns_are_clean() {
        assert!(ExitReason::Normal.is_clean());
        assert!(ExitReason::ShutdownWith("x".into()).is_clean());
        assert!(!ExitReason::Killed.is_clean());
        assert!(!ExitReason::Abnormal("x".into()).is_clean());
    }
}
