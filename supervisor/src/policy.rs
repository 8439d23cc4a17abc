//! The policy vocabulary every other module uses: OTP's restart strategies, restart types, shutdown specs,
//! child types and auto shutdown, and ringvisor's restart backoff.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a supervisor restarts its children when one of them exits and must be restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Restart only the child that exited.
    OneForOne,
    /// Stop every other child (reverse start order), then start them all (start order).
    OneForAll,
    /// Stop the children started after the one that exited, then start it and them again.
    RestForOne,
    /// One child template; children are added at run time with `start_child` and restarted one for one.
    SimpleOneForOne,
}

/// On which device a GPU child takes its slot, when the runtime drives several devices (with one device
/// every placement is that device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// On the device with the most free slots (the lowest index among equals): the default.
    #[default]
    FewestInUse,
    /// On the devices in turn, skipping those without a free slot.
    RoundRobin,
    /// On this device (its index among the runtime's devices, from 0).
    Device(u32),
}

/// When a child is restarted (OTP's restart type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// Always restarted.
    Permanent,
    /// Restarted only after an abnormal exit (not after normal, shutdown or `{shutdown, _}`).
    Transient,
    /// Never restarted, not even as a bystander of a group restart; its spec is dropped when it ends.
    Temporary,
}

/// How a child is stopped by its supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shutdown {
    /// Killed at once (no cleanup runs).
    BrutalKill,
    /// Asked to stop; killed if it has not stopped within the timeout.
    Timeout(Duration),
    /// Asked to stop; waited for as long as it takes (the default for supervisors).
    Infinity,
}

/// Whether a child is a worker or a supervisor (for `count_children` and shutdown defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildType {
    /// Any actor that is not a supervisor: GPU actors and host actors.
    Worker,
    /// A nested supervisor.
    Supervisor,
}

/// When a supervisor shuts itself down because significant children ended (OTP 24+).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoShutdown {
    /// Never (the default).
    #[default]
    Never,
    /// As soon as any significant child ends on its own and is not restarted.
    AnySignificant,
    /// Once every significant child has ended on its own and none is left running.
    AllSignificant,
}

/// Restart backoff, beyond OTP: the n-th consecutive restart of a child waits
/// `min(max, initial * 2^(n-1))`, spread by up to `jitter` (a fraction) either way. A child that ran for
/// at least `reset_after` before exiting starts again from `initial`. Restarts still count toward the
/// supervisor's intensity when they happen.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    /// Delay before the first restart.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Fraction of the delay added or removed at random (0 to 1).
    pub jitter: f64,
    /// A run at least this long resets the delay to `initial`.
    pub reset_after: Duration,
}

impl Backoff {
    /// Exponential backoff from `initial` to `max`, 10% jitter, reset after 10 x `max` of stable running.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Self { initial, max, jitter: 0.1, reset_after: max.saturating_mul(10) }
    }

    /// Sets the jitter fraction (clamped to 0..=1).
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// Sets the stable period after which the delay resets.
    pub fn reset_after(mut self, period: Duration) -> Self {
        self.reset_after = period;
        self
    }

    /// The delay before restart number `attempt` (1-based) of a run of consecutive restarts, without jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        self.initial.saturating_mul(1u32 << doublings.min(31)).min(self.max)
    }

    /// The delay with jitter drawn from `unit` (a number in 0..1).
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let base = self.base_delay(attempt).as_secs_f64();
        let spread = base * self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        Duration::from_secs_f64((base + spread).max(0.0))
    }
}

impl Strategy {
    /// OTP's name for it: `one_for_one`, `one_for_all`, `rest_for_one`, `simple_one_for_one`.
    pub fn label(self) -> &'static str {
        match self {
            Strategy::OneForOne => "one_for_one",
            Strategy::OneForAll => "one_for_all",
            Strategy::RestForOne => "rest_for_one",
            Strategy::SimpleOneForOne => "simple_one_for_one",
        }
    }
}

impl Restart {
    /// OTP's name for it: `permanent`, `transient`, `temporary`.
    pub fn label(self) -> &'static str {
        match self {
            Restart::Permanent => "permanent",
            Restart::Transient => "transient",
            Restart::Temporary => "temporary",
        }
    }
}

impl AutoShutdown {
    /// OTP's name for it: `never`, `any_significant`, `all_significant`.
    pub fn label(self) -> &'static str {
        match self {
            AutoShutdown::Never => "never",
            AutoShutdown::AnySignificant => "any_significant",
            AutoShutdown::AllSignificant => "all_significant",
        }
    }
}

impl Shutdown {
    /// As a TOML spec writes it: `brutal_kill`, `infinity`, or the timeout in milliseconds (`5000 ms`).
    pub fn label(self) -> String {
        match self {
            Shutdown::BrutalKill => "brutal_kill".into(),
            Shutdown::Timeout(d) => format!("{} ms", d.as_millis()),
            Shutdown::Infinity => "infinity".into(),
        }
    }
}

impl Placement {
    /// As a TOML spec writes it: `fewest_in_use`, `round_robin`, or `device N`.
    pub fn label(self) -> String {
        match self {
            Placement::FewestInUse => "fewest_in_use".into(),
            Placement::RoundRobin => "round_robin".into(),
            Placement::Device(d) => format!("device {d}"),
        }
    }
}
