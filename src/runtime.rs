//! The runtime: a device and the supervision tree that runs on it, brought up and down together.

use std::path::Path;

use ringvisor_device::{Device, DeviceConfig, DeviceError};
use ringvisor_supervisor::{
    ChildRef, DeadLetters, GpuActorRef, Registry, RegistryError, Services, SpecErrors, SpecLoader, SupervisorError,
    SupervisorRef, SupervisorSpec,
};

/// Errors of bringing a runtime up.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The device could not be opened.
    #[error("device: {0}")]
    Device(#[from] DeviceError),
    /// The spec file is invalid (every problem, with its path).
    #[error("invalid spec:\n{0}")]
    Spec(#[from] SpecErrors),
    /// The root supervisor did not start.
    #[error("supervisor: {0}")]
    Supervisor(#[from] SupervisorError),
}

/// How to build a [`Runtime`].
pub struct RuntimeBuilder {
    device: DeviceConfig,
    dead_letters: DeadLetters,
    root_id: String,
}

impl RuntimeBuilder {
    /// The device configuration (default: [`DeviceConfig::default`], the CPU backend).
    pub fn device(mut self, config: DeviceConfig) -> Self {
        self.device = config;
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

    /// Opens the device and starts `spec` as the root supervisor on it.
    pub async fn start(self, spec: SupervisorSpec) -> Result<Runtime, RuntimeError> {
        let device = Device::open(self.device)?;
        let services = Services::with_device_and_dead_letters(device.clone(), self.dead_letters);
        match SupervisorRef::start(self.root_id, spec, services.clone()).await {
            Ok(root) => Ok(Runtime { device, services, root }),
            Err(e) => {
                device.shutdown();
                Err(e.into())
            }
        }
    }

    /// Opens the device and starts the tree described by a TOML file (see `ringvisor_supervisor::config`).
    /// Behaviour names are checked against the device's behaviours; `loader` resolves host actors.
    pub async fn start_toml(self, path: impl AsRef<Path>, loader: SpecLoader) -> Result<Runtime, RuntimeError> {
        let loader = loader.behaviours(self.device.behaviours.names().map(str::to_string));
        let spec = loader.load_file(path)?;
        self.start(spec).await
    }
}

/// A running device with its supervision tree.
pub struct Runtime {
    device: Device,
    services: Services,
    root: SupervisorRef,
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder { device: DeviceConfig::default(), dead_letters: DeadLetters::default(), root_id: "root".into() }
    }

    /// Opens a device with `config` and starts `spec` on it.
    pub async fn start(config: DeviceConfig, spec: SupervisorSpec) -> Result<Self, RuntimeError> {
        Self::builder().device(config).start(spec).await
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
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

    /// The root supervisor.
    pub fn root(&self) -> &SupervisorRef {
        &self.root
    }

    /// The GPU actor registered under `name`.
    pub fn gpu(&self, name: &str) -> Option<GpuActorRef> {
        self.registry().lookup(name).and_then(|c| c.gpu())
    }

    /// Every registered actor whose name matches `pattern` (`*`, `**`, `?`).
    pub fn find(&self, pattern: &str) -> Result<Vec<(String, ChildRef)>, RegistryError> {
        self.registry().find(pattern)
    }

    /// Fault injection into this runtime's children (for tests).
    pub fn faults(&self) -> crate::faults::FaultInjector<'_> {
        crate::faults::FaultInjector::new(&self.services)
    }

    /// Stops the tree (children in reverse start order), then the device.
    pub async fn shutdown(self) {
        self.root.shutdown().await;
        self.device.shutdown();
    }
}
