//! How children start: GPU children (a behaviour in a device slot), host actors from a factory.
//! (Nested supervisors start in `supervisor`.)

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell};

use crate::policy::Placement;
use crate::services::Services;

/// The reason a spawn failed, without ractor's wrapping.
pub(crate) fn spawn_error(e: ractor::SpawnErr) -> String {
    match e {
        ractor::SpawnErr::StartupFailed(inner) => inner.to_string(),
        other => other.to_string(),
    }
}

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a factory gets to start one incarnation of a host actor child.
pub struct StartContext {
    /// The supervisor: link the new actor to it (see [`StartContext::spawn_linked`]).
    pub supervisor: ActorCell,
    /// The child's id.
    pub id: String,
    /// Which start attempt of this child this is (the first start is 1).
    pub attempt: u32,
    /// Arguments of a dynamic (`simple_one_for_one`) start; empty otherwise.
    pub args: Vec<u8>,
    /// The tree's services (registry, dead letters, device).
    pub services: Services,
}

impl StartContext {
    /// Spawns `actor` linked to the supervisor, as a child must be.
    pub async fn spawn_linked<A: Actor>(&self, actor: A, args: A::Arguments) -> Result<ActorCell, String> {
        A::spawn_linked(None, actor, args, self.supervisor.clone())
            .await
            .map(|(actor_ref, _)| actor_ref.get_cell())
            .map_err(spawn_error)
    }
}

/// Starts one incarnation of a host actor child. Implemented for async closures
/// `Fn(StartContext) -> impl Future<Output = Result<ActorCell, String>>`.
pub trait ActorFactory: Send + Sync + 'static {
    /// Spawns the actor linked to `ctx.supervisor`, or says why it could not.
    fn start(&self, ctx: StartContext) -> BoxFuture<Result<ActorCell, String>>;
}

impl<F, Fut> ActorFactory for F
where
    F: Fn(StartContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ActorCell, String>> + Send + 'static,
{
    fn start(&self, ctx: StartContext) -> BoxFuture<Result<ActorCell, String>> {
        Box::pin(self(ctx))
    }
}

/// The watchdog's default bound on a stale heartbeat with work pending.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(1);

/// Init bytes of a GPU child: fixed, or computed per start attempt.
#[derive(Clone)]
enum GpuInit {
    Fixed(Vec<u8>),
    PerAttempt(Arc<dyn Fn(u32) -> Vec<u8> + Send + Sync>),
}

/// A GPU actor child: a behaviour (by name), its init bytes, where it runs (a device placement, optionally a
/// fixed slot) and what happens when its device is lost.
#[derive(Clone)]
pub struct GpuChild {
    behaviour: String,
    init: GpuInit,
    slot: Option<u32>,
    placement: Placement,
    failover: bool,
    start_timeout: Duration,
    heartbeat_timeout: Option<Duration>,
    mirror: Mirroring,
}

/// Whether a GPU child is mirrored by a ractor actor: as its supervisor says, or as the child says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Mirroring {
    /// As the supervisor's [`SupervisorSpec::mirrored`](crate::SupervisorSpec::mirrored) says.
    #[default]
    Inherit,
    /// Not mirrored.
    Off,
    /// Mirrored, found as the spec says.
    On(MirrorSpec),
}

/// How a mirrored GPU child's ractor actor is found: see [`GpuChild::mirrored`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MirrorSpec {
    /// Registered in ractor's registry under the child's tree name.
    pub(crate) registered: bool,
    /// The ractor `pg` groups each incarnation's mirror joins.
    pub(crate) groups: Vec<String>,
}

impl MirrorSpec {
    /// Whether nothing finds the mirror but its child's handle: then it is spawned when first asked for.
    pub(crate) fn on_demand(&self) -> bool {
        !self.registered && self.groups.is_empty()
    }
}

impl fmt::Debug for GpuChild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuChild")
            .field("behaviour", &self.behaviour)
            .field("slot", &self.slot)
            .field("placement", &self.placement)
            .field("failover", &self.failover)
            .field("start_timeout", &self.start_timeout)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("mirror", &self.mirror)
            .finish()
    }
}

impl GpuChild {
    /// A child running `behaviour` (a builtin such as `counter`, or a user behaviour), with empty init.
    pub fn new(behaviour: impl Into<String>) -> Self {
        Self {
            behaviour: behaviour.into(),
            init: GpuInit::Fixed(Vec::new()),
            slot: None,
            placement: Placement::default(),
            failover: false,
            start_timeout: Duration::from_secs(5),
            heartbeat_timeout: Some(DEFAULT_HEARTBEAT_TIMEOUT),
            mirror: Mirroring::Inherit,
        }
    }

    /// Whether each incarnation of the child is mirrored by a ractor actor (the design card's shape), whatever
    /// its supervisor's [`SupervisorSpec::mirrored`](crate::SupervisorSpec::mirrored) says (on by default). The
    /// mirror ([`crate::GpuMessage`]) answers `call!`/`cast!` from the device, is the child's
    /// [`ChildRef::actor`](crate::ChildRef::actor), and ends with its incarnation as an OTP process does: a crash
    /// fails it (an actor linked to it sees `SupervisionEvent::ActorFailed`), a stop stops it, and the next
    /// incarnation has a mirror of its own (a new `ActorRef`, as a restarted OTP child has a new pid). A mirror
    /// that nothing but the child's handle can find (not [registered](GpuChild::mirror_registered), in no
    /// [group](GpuChild::mirror_group)) is spawned when it is first asked for, so a fleet pays for the mirrors
    /// it uses.
    pub fn mirrored(mut self, on: bool) -> Self {
        self.mirror = match (on, self.mirror) {
            (true, Mirroring::On(spec)) => Mirroring::On(spec),
            (true, _) => Mirroring::On(MirrorSpec::default()),
            (false, _) => Mirroring::Off,
        };
        self
    }

    /// Mirrors the child (see [`GpuChild::mirrored`]) and registers each mirror in ractor's registry under the
    /// child's tree name (`ractor::registry::where_is`) as its incarnation starts. Names there are global to the
    /// process: when another actor holds the name, the mirror runs unnamed and a warning is logged.
    pub fn mirror_registered(self) -> Self {
        self.with_mirror(|spec| spec.registered = true)
    }

    /// Mirrors the child (see [`GpuChild::mirrored`]) and has each mirror join the ractor `pg` group `group` as
    /// its incarnation starts (leaving it when the incarnation ends).
    pub fn mirror_group(self, group: impl Into<String>) -> Self {
        let group = group.into();
        self.with_mirror(|spec| spec.groups.push(group))
    }

    /// Mirrors the child, its mirror's spec changed by `change`.
    fn with_mirror(mut self, change: impl FnOnce(&mut MirrorSpec)) -> Self {
        let mut spec = match std::mem::take(&mut self.mirror) {
            Mirroring::On(spec) => spec,
            Mirroring::Inherit | Mirroring::Off => MirrorSpec::default(),
        };
        change(&mut spec);
        self.mirror = Mirroring::On(spec);
        self
    }

    /// Whether the child is mirrored by a ractor actor as set on the child: `None` when it follows its
    /// supervisor's [`SupervisorSpec::mirrored`](crate::SupervisorSpec::mirrored).
    pub fn is_mirrored(&self) -> Option<bool> {
        match self.mirror {
            Mirroring::Inherit => None,
            Mirroring::Off => Some(false),
            Mirroring::On(_) => Some(true),
        }
    }

    /// How the child is mirrored under a supervisor whose children are mirrored by default or not.
    pub(crate) fn mirror_under(&self, mirrored_by_default: bool) -> Option<MirrorSpec> {
        match &self.mirror {
            Mirroring::Inherit => mirrored_by_default.then(MirrorSpec::default),
            Mirroring::Off => None,
            Mirroring::On(spec) => Some(spec.clone()),
        }
    }

    /// The watchdog's bound (default 1 s): a child whose heartbeat has not moved for this long while
    /// messages wait in its inbox is hung, and is failed so its supervisor acts. `None` turns the watchdog
    /// off for this child.
    pub fn heartbeat_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.heartbeat_timeout = timeout;
        self
    }

    pub(crate) fn watchdog(&self) -> Option<Duration> {
        self.heartbeat_timeout
    }

    /// Init bytes handed to the behaviour's init on every start.
    pub fn init(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.init = GpuInit::Fixed(bytes.into());
        self
    }

    /// Init bytes computed for each start attempt (the first start is attempt 1).
    pub fn init_with(mut self, f: impl Fn(u32) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.init = GpuInit::PerAttempt(Arc::new(f));
        self
    }

    /// Pins the child to a slot (by default the lowest free slot is taken at first start).
    pub fn slot(mut self, slot: u32) -> Self {
        self.slot = Some(slot);
        self
    }

    /// Pins the child to device `index` of the runtime's devices (shorthand for
    /// `placement(Placement::Device(index))`).
    pub fn device(self, index: u32) -> Self {
        self.placement(Placement::Device(index))
    }

    /// Where the child takes its slot when the runtime has several devices (default
    /// [`Placement::FewestInUse`]). The device is chosen when the child is added; it changes only when that
    /// device is lost (see [`GpuChild::failover`]).
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// When the child's device is lost, restart it on another device with a free slot (chosen by its
    /// placement among the devices still running) instead of on the device that replaces the lost one
    /// (the default). A child pinned to a device fails over too when this is set.
    pub fn failover(mut self, failover: bool) -> Self {
        self.failover = failover;
        self
    }

    /// How long a start may wait for the device's answer (default 5 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// The behaviour's name.
    pub fn behaviour(&self) -> &str {
        &self.behaviour
    }

    /// The slot asked for, if any.
    pub fn wanted_slot(&self) -> Option<u32> {
        self.slot
    }

    /// Where the child takes its slot.
    pub fn wanted_placement(&self) -> Placement {
        self.placement
    }

    /// Whether the child moves to another device when its own is lost.
    pub fn fails_over(&self) -> bool {
        self.failover
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.start_timeout
    }

    /// Every start hands the behaviour the same init bytes (given `dynamic_args`): a restart the device
    /// carries out by itself (a grant) would start it as the supervisor does.
    pub(crate) fn same_init_every_start(&self, dynamic_args: &[u8]) -> bool {
        !dynamic_args.is_empty() || matches!(self.init, GpuInit::Fixed(_))
    }

    pub(crate) fn init_for(&self, attempt: u32, dynamic_args: &[u8]) -> Vec<u8> {
        if !dynamic_args.is_empty() {
            return dynamic_args.to_vec();
        }
        self.init_bytes(attempt)
    }

    /// The init bytes start number `attempt` hands the behaviour (the first start is attempt 1).
    pub fn init_bytes(&self, attempt: u32) -> Vec<u8> {
        match &self.init {
            GpuInit::Fixed(b) => b.clone(),
            GpuInit::PerAttempt(f) => f(attempt),
        }
    }
}
