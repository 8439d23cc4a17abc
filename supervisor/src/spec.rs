//! What a supervisor is told to do: its flags and its children's specifications, built in code (this
//! module) or loaded from TOML (`config`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::child::{ActorFactory, GpuChild};
use crate::policy::{AutoShutdown, Backoff, ChildType, Restart, Shutdown, Strategy};

/// How a child is started.
#[derive(Clone)]
pub enum ChildStart {
    /// A GPU actor in a device slot, driven by its supervisor (no host actor of its own).
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
    /// Whether its GPU children are mirrored by ractor actors unless a child says otherwise
    /// ([`GpuChild::mirrored`](crate::GpuChild::mirrored)); `None` (the default): as the supervisor above it,
    /// and at the root [`MIRRORED_BY_DEFAULT`].
    pub mirrored: Option<bool>,
}

/// Whether a GPU child is mirrored by a ractor actor when neither it nor a supervisor above it says: yes, as
/// the design card has it (each GPU actor a ractor actor). A mirror that only its child's handle can find is
/// spawned when first asked for, so a child whose mirror nobody uses costs what an unmirrored one does.
pub const MIRRORED_BY_DEFAULT: bool = true;

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
            mirrored: None,
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

    /// Whether this supervisor's GPU children, and those of the supervisors below it that do not say, are
    /// mirrored by ractor actors (see [`SupervisorSpec::mirrored`](SupervisorSpec#structfield.mirrored)); a
    /// child's own [`GpuChild::mirrored`](crate::GpuChild::mirrored) wins.
    pub fn mirrored(mut self, on: bool) -> Self {
        self.mirrored = Some(on);
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
            "{:indent$}sup strategy={:?} intensity={} period={:?} auto_shutdown={:?} mirrored={:?}",
            "",
            self.strategy,
            self.intensity,
            self.period,
            self.auto_shutdown,
            self.mirrored,
            indent = depth * 2
        );
        for c in &self.children {
            let kind = match &c.start {
                ChildStart::Gpu(g) => {
                    let mirror = (g.is_mirrored(), g.mirror_under(false));
                    format!("gpu={} slot={:?} mirror={mirror:?}", g.behaviour(), g.wanted_slot())
                }
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
