//! The runtime: a device and the supervision tree that runs on it, brought up and down together.

use std::path::Path;
use std::time::Duration;

mod end;

pub use end::RuntimeEnd;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use ringvisor_device::{Device, DeviceConfig, DeviceError, DeviceHealth};
use ringvisor_supervisor::{
    ActorFactory, AutoShutdown, BoxFuture, ChildRef, ChildSpec, DeadLetters, GpuActorRef, Registry, RegistryError,
    Restart, Services, Shutdown, SpecErrors, SpecLoader, StartContext, Strategy, SupervisorError, SupervisorRef,
    SupervisorSpec,
};

/// Errors of bringing a runtime up.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The device could not be opened.
    #[error("device: {0}")]
    Device(#[from] DeviceError),
    /// Device `index` of several could not be opened.
    #[error("device {0}: {1}")]
    DeviceAt(usize, DeviceError),
    /// The builder was given an empty list of devices.
    #[error("a runtime needs at least one device")]
    NoDevice,
    /// The spec file is invalid (every problem, with its path).
    #[error("invalid spec:\n{0}")]
    Spec(#[from] SpecErrors),
    /// The root supervisor did not start.
    #[error("supervisor: {0}")]
    Supervisor(#[from] SupervisorError),
}

/// How to build a [`Runtime`].
pub struct RuntimeBuilder {
    devices: Vec<DeviceConfig>,
    dead_letters: DeadLetters,
    root_id: String,
    device_restarts: (u32, Duration),
    quarantine_limit: usize,
}

/// The id of the runtime's top supervisor (one_for_all over the device and the tree).
pub const TOP_SUPERVISOR: &str = "ringvisor";
/// The id of the device child under the top supervisor.
pub const DEVICE_CHILD: &str = "device";

impl RuntimeBuilder {
    /// The device configuration (default: one device, [`DeviceConfig::default`], the CPU backend).
    pub fn device(mut self, config: DeviceConfig) -> Self {
        self.devices = vec![config];
        self
    }

    /// Several devices, device `i` opened with `configs[i]` (on the CPU backend, independent executors; on
    /// CUDA, one per GPU by each config's ordinal). GPU children are placed on them by their
    /// [`Placement`](ringvisor_supervisor::Placement). With more than one device, a lost device fails only
    /// the GPU children it held (reason `device_lost`); the runtime opens a new device in its place, and
    /// the children's supervisors restart them there, or on another device if they fail over.
    pub fn devices(mut self, configs: impl IntoIterator<Item = DeviceConfig>) -> Self {
        self.devices = configs.into_iter().collect();
        self
    }

    /// The dead-letter queue (default: 10,000 letters, dropping the oldest).
    pub fn dead_letters(mut self, queue: DeadLetters) -> Self {
        self.dead_letters = queue;
        self
    }

    /// The root supervisor's id (default `root`).
    pub fn root_id(mut self, id: impl Into<String>) -> Self {
        self.root_id = id.into();
        self
    }

    /// Most device restarts within `period` (default 3 in 60 s); one more and the runtime gives up (its
    /// top supervisor shuts down, the tree with it).
    pub fn device_restarts(mut self, max: u32, period: Duration) -> Self {
        self.device_restarts = (max, period);
        self
    }

    /// Most quarantined slots a device may have (default 16); one more and the device is restarted: with one
    /// device, the whole tree (as for a lost device); with several, as a lost device of several (only its
    /// children exit, `device_lost`, and restart on its replacement).
    pub fn quarantine_limit(mut self, limit: usize) -> Self {
        self.quarantine_limit = limit;
        self
    }

    /// Opens the device and starts `spec` as the root supervisor on it.
    ///
    /// The device and the tree are the two children of a top supervisor (`ringvisor`, one_for_all): when the
    /// device is lost (block 0's heartbeat stale past [`DeviceConfig::lost_after`]) or has more quarantined
    /// slots than the limit, the tree is stopped, a new device (a new persistent kernel) is opened, and the
    /// tree is started again from its spec. If the root supervisor itself gives up (its intensity
    /// exceeded), the runtime shuts down.
    pub async fn start(self, spec: SupervisorSpec) -> Result<Runtime, RuntimeError> {
        if self.devices.is_empty() {
            return Err(RuntimeError::NoDevice);
        }
        spec.validate()?;
        spec.validate_capacity(&self.devices.iter().map(|d| d.slots).collect::<Vec<_>>())?;
        let devices = open_devices(&self.devices)?;
        let services = Services::with_devices(devices.clone(), self.dead_letters);
        let keeper = DeviceKeeper { configs: self.devices, quarantine_limit: self.quarantine_limit };
        let (max, period) = self.device_restarts;
        let top = SupervisorSpec::new(Strategy::OneForAll)
            .intensity(max, period)
            .auto_shutdown(AutoShutdown::AnySignificant)
            .child(ChildSpec::actor(DEVICE_CHILD, keeper).shutdown(Shutdown::BrutalKill))
            .child(
                ChildSpec::supervisor(self.root_id.clone(), spec)
                    .restart(Restart::Transient)
                    .significant(true)
                    .shutdown(Shutdown::Infinity),
            );
        let events = services.events().subscribe();
        let started = async {
            // The user's tree was checked above; the top level around it is built here.
            let top = SupervisorRef::start_validated(TOP_SUPERVISOR, top, services.clone()).await?;
            let end = end::watch_end(events, top.clone(), self.root_id.clone());
            let root_child = top.child(&self.root_id).await?;
            let root = SupervisorRef::from_child(&root_child).ok_or(SupervisorError::NoProc)?;
            Ok::<_, SupervisorError>(Runtime { services, top, root_child, first_root: root, end })
        };
        match started.await {
            Ok(rt) => Ok(rt),
            Err(e) => {
                devices.iter().for_each(Device::shutdown);
                Err(e.below(&[TOP_SUPERVISOR, &self.root_id]).into())
            }
        }
    }

    /// Opens the device and starts the tree described by a TOML file (see `ringvisor_supervisor::config`).
    /// Behaviour names are checked against the device's behaviours; `loader` resolves host actors.
    pub async fn start_toml(self, path: impl AsRef<Path>, loader: SpecLoader) -> Result<Runtime, RuntimeError> {
        let mut behaviours: Vec<String> = Vec::new();
        for config in &self.devices {
            behaviours.extend(config.behaviours.names().map(str::to_string));
        }
        let loader = loader.behaviours(behaviours).devices(self.devices.len());
        let spec = loader.load_file(path)?;
        self.start(spec).await
    }
}

/// A running device with its supervision tree.
pub struct Runtime {
    services: Services,
    top: SupervisorRef,
    root_child: ChildRef,
    first_root: SupervisorRef,
    end: tokio::sync::watch::Receiver<Option<RuntimeEnd>>,
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            devices: vec![DeviceConfig::default()],
            dead_letters: DeadLetters::default(),
            root_id: "root".into(),
            device_restarts: (3, Duration::from_secs(60)),
            quarantine_limit: 16,
        }
    }

    /// Opens a device with `config` and starts `spec` on it.
    pub async fn start(config: DeviceConfig, spec: SupervisorSpec) -> Result<Self, RuntimeError> {
        Self::builder().device(config).start(spec).await
    }

    /// The device the tree runs on now (a new one after a device restart); with several devices, device 0.
    pub fn device(&self) -> Device {
        self.services.device().expect("a runtime always has a device")
    }

    /// Device `index` as it is now (`None` beyond the runtime's devices).
    pub fn device_at(&self, index: usize) -> Option<Device> {
        self.services.device_at(index)
    }

    /// Every device of the runtime, by index.
    pub fn devices(&self) -> Vec<Device> {
        self.services.devices()
    }

    /// What the tree shares (registry, dead letters, tree events).
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        self.services.registry()
    }

    /// The dead-letter queue.
    pub fn dead_letters(&self) -> &DeadLetters {
        self.services.dead_letters()
    }

    /// The root supervisor (its current incarnation; a device restart starts a new one).
    pub fn root(&self) -> SupervisorRef {
        SupervisorRef::from_child(&self.root_child).unwrap_or_else(|| self.first_root.clone())
    }

    /// The top supervisor: one_for_all over the device (child `device`) and the root supervisor.
    pub fn top(&self) -> &SupervisorRef {
        &self.top
    }

    /// The GPU actor registered under `name`.
    pub fn gpu(&self, name: &str) -> Option<GpuActorRef> {
        self.registry().lookup(name).and_then(|c| c.gpu())
    }

    /// Every registered actor whose name matches the glob `pattern`: `*`, `?` and `[a-z]` within a segment,
    /// `**` across segments (see [`Registry::find`]).
    pub fn find(&self, pattern: &str) -> Result<Vec<(String, ChildRef)>, RegistryError> {
        self.registry().find(pattern)
    }

    /// Fault injection into this runtime's children (for tests).
    pub fn faults(&self) -> crate::faults::FaultInjector<'_> {
        crate::faults::FaultInjector::new(&self.services)
    }

    /// True while the tree runs (false once it has ended for any reason: see [`Runtime::wait`]).
    pub fn is_running(&self) -> bool {
        self.top.is_alive()
    }

    /// Waits until the tree stops running, and says why (at once if it already has). A tree stops when the
    /// root supervisor gives up or exits, when the device fails more often than allowed, or when it is
    /// shut down; afterwards handles answer `Gone`. Call [`Runtime::shutdown`] after it to release the device.
    pub async fn wait(&self) -> RuntimeEnd {
        let mut end = self.end.clone();
        // The watching task is gone (an error) only when the tokio runtime itself is shutting down.
        let known = end.wait_for(Option::is_some).await.ok().and_then(|end| end.clone());
        known.unwrap_or(RuntimeEnd::Shutdown)
    }

    /// Stops the tree (children in reverse start order, shutdown specs honoured), then the devices: what
    /// [`Runtime::shutdown`] does, from a shared reference, so that one task can stop a runtime another task
    /// waits on (`Arc<Runtime>`: the waiter's [`Runtime::wait`] then returns [`RuntimeEnd::Shutdown`]).
    /// Stopping a runtime already stopped does nothing.
    pub async fn stop(&self) {
        self.top.shutdown().await;
        self.services.devices().iter().for_each(Device::shutdown);
    }

    /// Stops the tree (children in reverse start order, shutdown specs honoured), then the devices.
    pub async fn shutdown(self) {
        self.stop().await;
    }
}

/// Opens one device per config; if one fails, those already open are shut down.
fn open_devices(configs: &[DeviceConfig]) -> Result<Vec<Device>, RuntimeError> {
    let mut devices = Vec::with_capacity(configs.len());
    for (index, config) in configs.iter().enumerate() {
        match Device::open(config.clone()) {
            Ok(device) => devices.push(device),
            Err(e) => {
                devices.iter().for_each(Device::shutdown);
                return Err(if configs.len() == 1 {
                    RuntimeError::Device(e)
                } else {
                    RuntimeError::DeviceAt(index, e)
                });
            }
        }
    }
    Ok(devices)
}

/// The devices as a supervised child of the top supervisor. With one device: it opens a new device when it
/// is restarted, and exits abnormally when its device is lost or has too many quarantined slots, so that the
/// top supervisor (one_for_all) stops the tree, restarts the device and starts the tree again. With several
/// devices, a lost device is replaced in place (its children fail with `device_lost` and their supervisors
/// restart them); the keeper exits (restarting everything) only if the replacement cannot be opened or a
/// device has too many quarantined slots.
struct DeviceKeeper {
    configs: Vec<DeviceConfig>,
    quarantine_limit: usize,
}

/// How often the keeper looks at the devices.
const KEEPER_CHECK: Duration = Duration::from_millis(20);

impl ActorFactory for DeviceKeeper {
    fn start(&self, ctx: StartContext) -> BoxFuture<Result<ActorCell, String>> {
        let (configs, limit) = (self.configs.clone(), self.quarantine_limit);
        Box::pin(async move {
            if ctx.attempt > 1 {
                // A restart: the tree on the old devices is stopped (one_for_all); bring up new kernels.
                ctx.services.devices().iter().for_each(Device::shutdown);
                for (index, config) in configs.iter().enumerate() {
                    let device =
                        Device::open(config.clone()).map_err(|e| format!("cannot reopen device {index}: {e}"))?;
                    tracing::warn!(attempt = ctx.attempt, index, backend = %device.describe(), "device restarted");
                    metrics::counter!("ringvisor_device_restarts_total").increment(1);
                    ctx.services.replace_device_at(index, device);
                }
            }
            ctx.spawn_linked(KeeperActor, Keeper { services: ctx.services.clone(), configs, limit }).await
        })
    }
}

struct KeeperActor;

/// What the keeper watches: the tree's devices, with the configs to reopen them.
struct Keeper {
    services: Services,
    configs: Vec<DeviceConfig>,
    limit: usize,
}

impl Keeper {
    /// One look at every device; `Err` makes the keeper exit (the whole tree restarts).
    fn check(&self) -> Result<(), String> {
        let several = self.configs.len() > 1;
        for (index, config) in self.configs.iter().enumerate() {
            let device = self.services.device_at(index).ok_or("no device")?;
            let quarantined = self.services.quarantined_slots_on(index).len();
            if quarantined > self.limit {
                if !several {
                    return Err(format!("{quarantined} slots quarantined (limit {})", self.limit));
                }
                // One of several: given up on as a lost device (only its children restart), and replaced below.
                let cause = format!("{quarantined} slots quarantined on device {index} (limit {})", self.limit);
                tracing::warn!(index, quarantined, "device retired: too many quarantined slots");
                device.retire(cause);
            }
            if device.health() == DeviceHealth::Lost {
                if !several {
                    return Err("device lost: block 0 stopped answering".into());
                }
                // Its children exit `device_lost` (routed from the device's events); those restarted wait for
                // this replacement.
                let new = Device::open(config.clone())
                    .map_err(|e| format!("device {index} lost, and a new one cannot be opened: {e}"))?;
                tracing::warn!(index, backend = %new.describe(), "lost device replaced");
                metrics::counter!("ringvisor_device_restarts_total").increment(1);
                self.services.replace_device_at(index, new);
            }
        }
        Ok(())
    }
}

impl Actor for KeeperActor {
    type Msg = ();
    type State = Keeper;
    type Arguments = Keeper;

    async fn pre_start(&self, myself: ActorRef<()>, args: Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(KEEPER_CHECK, || ());
        Ok(args)
    }

    async fn handle(&self, _: ActorRef<()>, _: (), keeper: &mut Self::State) -> Result<(), ActorProcessingErr> {
        keeper.check().map_err(Into::into)
    }
}
