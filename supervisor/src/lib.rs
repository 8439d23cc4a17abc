//! # ringvisor-supervisor
//!
//! The policy layer: OTP supervision trees on ractor that decide when `ringvisor-device` creates, kills and
//! restarts GPU actors, plus the named registry, the dead-letter queue and declarative specs.
//!
//! - [`SupervisorRef::start`] starts a tree from a [`SupervisorSpec`] (built in code, or loaded from TOML
//!   with [`SpecLoader`]); children are GPU actors ([`GpuChild`]), nested supervisors, or any ractor actor
//!   ([`ActorFactory`]).
//! - Each GPU child is mirrored by a slot actor that owns its device slot; [`GpuActorRef`] is a stable
//!   handle that survives restarts.
//! - [`Services`] holds what a tree shares: [`Registry`], [`DeadLetters`], [`TreeEvents`], the device.
#![warn(missing_docs)]

mod child;
pub mod config;
mod dead_letter;
mod error;
mod events;
mod handle;
mod intensity;
mod reason;
pub mod registry;
mod services;
mod slot_actor;
mod spec;
mod supervisor;

pub use child::{ActorFactory, BoxFuture, GpuChild, StartContext};
pub use config::{SpecError, SpecErrors, SpecLoader};
pub use dead_letter::{DeadLetter, DeadLetterReason, DeadLetterStats, DeadLetters, Origin, OverflowPolicy};
pub use error::{SendError, SupervisorError};
pub use events::{TreeEvent, TreeEvents};
pub use handle::{ChildRef, ChildStatus, GpuActorRef};
pub use reason::{stop_reason, ExitReason};
pub use registry::{Registry, RegistryError, RegistryEvent};
pub use services::{EventFault, Services};
pub use slot_actor::SlotMsg;
pub use spec::{AutoShutdown, Backoff, ChildSpec, ChildStart, ChildType, Restart, Shutdown, Strategy, SupervisorSpec};
pub use supervisor::{
    ChildCount, ChildInfo, RunState, Supervisor, SupervisorArgs, SupervisorMsg, SupervisorRef, SupervisorState,
};

pub use ractor;
pub use ringvisor_device as device;
