//! # ringvisor-supervisor
//!
//! The policy layer: OTP supervision trees on ractor that decide when `ringvisor-device` creates, kills and
//! restarts GPU actors, plus the named registry, the dead-letter queue and declarative specs.
//!
//! - [`SupervisorRef::start`] starts a tree from a [`SupervisorSpec`] (built in code, or loaded from TOML
//!   with [`SpecLoader`]); children are GPU actors ([`GpuChild`]), nested supervisors, or any ractor actor
//!   ([`ActorFactory`]).
//! - A GPU child's device slot is owned by its supervisor, which drives it (start, drain, kill) and hears of
//!   its end through the device's events: no ractor actor per GPU child. [`GpuActorRef`] is a stable handle
//!   that survives restarts.
//! - [`Services`] holds what a tree shares: [`Registry`], [`DeadLetters`], [`TreeEvents`], the device.
#![warn(missing_docs)]

mod child;
pub mod config;
mod dead_letter;
mod error;
mod gpu;
mod handle;
mod intensity;
mod mirror;
mod policy;
mod reason;
pub mod registry;
mod rounded;
mod services;
mod slots;
mod spec;
mod status;
mod supervisor;
mod sync;
mod tree_events;
mod validate;
pub mod wire;

pub use child::{ActorFactory, BoxFuture, GpuChild, StartContext};
pub use config::{SpecError, SpecErrors, SpecLoader};
pub use dead_letter::{
    DeadLetter, DeadLetterReason, DeadLetterStats, DeadLetters, DeviceOrigin, Origin, OverflowPolicy,
};
pub use error::{RegistryError, SendError, SupervisorError};
pub use handle::{ChildRef, GpuActorRef};
pub use mirror::{GpuMessage, MIRROR_CALL_TIMEOUT};
pub use policy::{AutoShutdown, Backoff, ChildType, Placement, Restart, Shutdown, Strategy};
pub use reason::{stop_reason, ExitReason};
pub use registry::{Registry, RegistryEvent};
pub use rounded::Rounded;
pub use services::Services;
pub use slots::EventFault;
pub use spec::{ChildSpec, ChildStart, SupervisorSpec, MIRRORED_BY_DEFAULT};
pub use status::{ChildStatus, RunState};
pub use supervisor::{
    ChildCount, ChildInfo, Supervisor, SupervisorArgs, SupervisorMsg, SupervisorRef, SupervisorState,
};
pub use tree_events::{TreeEvent, TreeEvents};

pub use ractor;
pub use ringvisor_device as device;
