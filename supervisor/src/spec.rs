//! What a supervisor is told to do: its flags and its children's specifications, built in code (this
//! module) or loaded from TOML (`config`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::child::{ActorFactory, GpuChild};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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

/// How a child is started.
#[derive(Clone)]
pub enum ChildStart {
    /// A GPU actor in a device slot, mirrored by a slot actor.
    Gpu(GpuChild),
    /// A nested supervisor.
    Supervisor(Box<SupervisorSpec>),
    /// Any ractor actor, spawned by a factory.
    Actor(Arc<dyn ActorFactory>),
}

impl fmt::Debug for ChildStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gpu(g) => f.debug_tuple("Gpu").field(g).finish(),
            Self::Supervisor(s) => f.debug_tuple("Supervisor").field(s).finish(),
            Self::Actor(_) => f.write_str("Actor(..)"),
        }
    }
}

/// One child of a supervisor.
#[derive(Clone, Debug)]
pub struct ChildSpec {
    /// Unique among its siblings.
    pub id: String,
    /// How it starts.
    pub start: ChildStart,
    /// When it is restarted (default permanent).
    pub restart: Restart,
    /// How it is stopped (default: 5 s timeout for workers, infinity for supervisors).
    pub shutdown: Shutdown,
    /// A significant child can shut its supervisor down (see [`AutoShutdown`]); never permanent.
    pub significant: bool,
    /// Registry name (`fleet/sensors/7`); for `simple_one_for_one` templates, `{id}` is replaced by the
    /// dynamic child's id.
    pub name: Option<String>,
    /// Restart backoff (none by default: OTP restarts at once).
    pub backoff: Option<Backoff>,
}

impl ChildSpec {
    fn new(id: impl Into<String>, start: ChildStart) -> Self {
        let shutdown = match start {
            ChildStart::Supervisor(_) => Shutdown::Infinity,
            _ => Shutdown::Timeout(Duration::from_secs(5)),
        };
        Self {
            id: id.into(),
            start,
            restart: Restart::Permanent,
            shutdown,
            significant: false,
            name: None,
            backoff: None,
        }
    }

    /// A GPU actor child.
    pub fn gpu(id: impl Into<String>, child: GpuChild) -> Self {
        Self::new(id, ChildStart::Gpu(child))
    }

    /// A nested supervisor child.
    pub fn supervisor(id: impl Into<String>, spec: SupervisorSpec) -> Self {
        Self::new(id, ChildStart::Supervisor(Box::new(spec)))
    }

    /// A host actor child started by `factory`.
    pub fn actor(id: impl Into<String>, factory: impl ActorFactory) -> Self {
        Self::new(id, ChildStart::Actor(Arc::new(factory)))
    }

    /// Sets the restart type.
    pub fn restart(mut self, restart: Restart) -> Self {
        self.restart = restart;
        self
    }

    /// Sets the shutdown spec.
    pub fn shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Marks the child significant.
    pub fn significant(mut self, significant: bool) -> Self {
        self.significant = significant;
        self
    }

    /// Binds the child to a registry name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets a restart backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Worker or supervisor.
    pub fn child_type(&self) -> ChildType {
        match self.start {
            ChildStart::Supervisor(_) => ChildType::Supervisor,
            _ => ChildType::Worker,
        }
    }
}

/// A supervisor: its flags and its children in start order.
#[derive(Clone, Debug)]
pub struct SupervisorSpec {
    /// Restart strategy.
    pub strategy: Strategy,
    /// Most restarts allowed within `period` (default 1); one more ends the supervisor.
    pub intensity: u32,
    /// The sliding window for `intensity` (default 5 s).
    pub period: Duration,
    /// Shutdown on significant children ending (default never).
    pub auto_shutdown: AutoShutdown,
    /// Children in start order (for `simple_one_for_one`: exactly one, the template).
    pub children: Vec<ChildSpec>,
}

impl Default for SupervisorSpec {
    fn default() -> Self {
        Self::new(Strategy::OneForOne)
    }
}

impl SupervisorSpec {
    /// A supervisor with OTP's defaults: intensity 1 in 5 s, auto_shutdown never, no children.
    pub fn new(strategy: Strategy) -> Self {
        Self {
            strategy,
            intensity: 1,
            period: Duration::from_secs(5),
            auto_shutdown: AutoShutdown::Never,
            children: Vec::new(),
        }
    }

    /// A `simple_one_for_one` supervisor whose children are all made from `template`.
    pub fn simple(template: ChildSpec) -> Self {
        Self::new(Strategy::SimpleOneForOne).child(template)
    }

    /// Sets intensity and period.
    pub fn intensity(mut self, restarts: u32, period: Duration) -> Self {
        self.intensity = restarts;
        self.period = period;
        self
    }

    /// Sets auto_shutdown.
    pub fn auto_shutdown(mut self, auto_shutdown: AutoShutdown) -> Self {
        self.auto_shutdown = auto_shutdown;
        self
    }

    /// Appends a child.
    pub fn child(mut self, child: ChildSpec) -> Self {
        self.children.push(child);
        self
    }

    /// A canonical one-line-per-node outline of the tree (flags, children and their settings), for
    /// comparing specs (a TOML file against the same tree built in code) and for showing them.
    pub fn outline(&self) -> String {
        let mut out = String::new();
        self.outline_into(0, &mut out);
        out
    }

    fn outline_into(&self, depth: usize, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "{:indent$}sup strategy={:?} intensity={} period={:?} auto_shutdown={:?}",
            "",
            self.strategy,
            self.intensity,
            self.period,
            self.auto_shutdown,
            indent = depth * 2
        );
        for c in &self.children {
            let kind = match &c.start {
                ChildStart::Gpu(g) => format!("gpu={} slot={:?}", g.behaviour(), g.wanted_slot()),
                ChildStart::Supervisor(_) => "supervisor".to_string(),
                ChildStart::Actor(_) => "actor".to_string(),
            };
            let _ = writeln!(
                out,
                "{:indent$}child id={} {kind} restart={:?} shutdown={:?} significant={} name={:?} backoff={:?}",
                "",
                c.id,
                c.restart,
                c.shutdown,
                c.significant,
                c.name,
                c.backoff,
                indent = depth * 2 + 2
            );
            if let ChildStart::Supervisor(nested) = &c.start {
                nested.outline_into(depth + 2, out);
            }
        }
    }

    /// Checks what a spec built in code can get wrong; the TOML loader reports the same errors with paths.
    pub fn validate(&self) -> Result<(), crate::SupervisorError> {
        let mut problems = Vec::new();
        crate::config::check_tree(self, "supervisor", &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(crate::SupervisorError::InvalidSpec(problems.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max() {
        let b = Backoff::exponential(Duration::from_millis(10), Duration::from_millis(100));
        assert_eq!(b.base_delay(1), Duration::from_millis(10));
        assert_eq!(b.base_delay(2), Duration::from_millis(20));
        assert_eq!(b.base_delay(4), Duration::from_millis(80));
        assert_eq!(b.base_delay(5), Duration::from_millis(100));
        assert_eq!(b.base_delay(500), Duration::from_millis(100));
        let j = b.jitter(0.5);
        assert_eq!(j.delay(1, 0.0), Duration::from_millis(5));
        assert_eq!(j.delay(1, 1.0), Duration::from_millis(15));
    }
}
