//! # ringvisor
//!
//! Erlang/OTP-style supervision for persistent GPU actors. This facade re-exports the layers:
//! [`device`] (the persistent kernel, its shared layout and backends) and [`supervisor`] (policy), and
//! brings them up together as a [`Runtime`].
//!
//! ```no_run
//! use ringvisor::prelude::*;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let spec = SupervisorSpec::new(Strategy::OneForOne)
//!     .child(ChildSpec::gpu("counter", GpuChild::new("counter")).name("app/counter"));
//! let rt = Runtime::start(DeviceConfig::default().slots(8), spec).await?;
//! let counter = rt.gpu("app/counter").expect("registered");
//! counter.send(&5i64.to_le_bytes())?;
//! rt.shutdown().await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod app;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod faults;
mod runtime;

pub use ringvisor_device as device;
pub use ringvisor_supervisor as supervisor;
pub use runtime::{Runtime, RuntimeBuilder, RuntimeEnd, RuntimeError, DEVICE_CHILD, TOP_SUPERVISOR};

/// The names most programs need: building and starting a tree, talking to its actors, watching it, and
/// breaking it on purpose in tests.
pub mod prelude {
    pub use crate::device::{BehaviourSet, DeviceCode, DeviceConfig, Reply, SlotFault, UserBehaviour};
    pub use crate::faults::InjectedFault;
    pub use crate::supervisor::{
        AutoShutdown, Backoff, ChildRef, ChildSpec, ChildStatus, DeadLetter, DeadLetterReason, ExitReason, GpuActorRef,
        GpuChild, Placement, Restart, SendError, Shutdown, SpecLoader, Strategy, SupervisorSpec, TreeEvent,
    };
    pub use crate::{Runtime, RuntimeEnd, RuntimeError};
    pub use std::time::Duration;
}
