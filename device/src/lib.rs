//! # ringvisor-device
//!
//! The mechanism layer of ringvisor: the shared memory layout of the persistent kernel (mirrored from
//! `kernels/`, the single source of truth), the host side of its rings, and the executors that run the device
//! code: the CPU backend (host threads running the very same step functions), the CUDA backend (a
//! persistent kernel compiled by NVRTC) and the WebGPU backend (the protocol's WGSL port, dispatched in rounds
//! through wgpu; feature `wgpu`).
//!
//! This crate knows nothing about supervision policy. It offers: create / kill / restart / drain / resume a
//! slot, send messages, receive replies and events, read a slot's control block, inject faults, and route
//! kernel-to-kernel messages between the devices of a process ([`Router`]).
//! `ringvisor-supervisor` decides when to call them.
//!
//! Layers, bottom up (as in cudarc): [`layout`] (the raw `#[repr(C)]` mirror), `shared` (checked single-field
//! access to the shared region), and [`Device`] (the safe API). Beside them: `codes` (the device's vocabulary),
//! [`error`], [`event`], [`message`], [`behaviour`], `ring` (wrapping positions), `backend` (the executors),
//! `sync`, `wait` and `thread_slice` (hand-offs, how host threads wait and are scheduled). `tests/architecture.rs` checks the layers.
#![warn(missing_docs)]

mod backend;
pub mod behaviour;
mod bulk;
mod busy_cores;
pub mod c_layout;
mod clock;
mod codes;
mod cpu_placement;
mod device;
pub mod error;
pub mod event;
#[doc(hidden)]
pub mod ffi;
mod interleave;
pub mod layout;
pub mod message;
mod ring;
mod shared;
pub mod sim;
mod spin_lock;
mod sync;
mod thread_slice;
mod wait;

pub use backend::cpu::CpuConfig;
pub use backend::cuda::emulated::{
    EmulatedDriver, EmulatedGpu, DEFAULT_MAPPED_LATENCY as EMULATED_MAPPED_LATENCY,
    DEFAULT_MAPPED_READ_COST as EMULATED_MAPPED_READ_COST, EXEC_TIMEOUT as EMULATED_EXEC_TIMEOUT,
};
pub use backend::cuda::{
    auto_idle_backoff as cuda_auto_idle_backoff, driver_available as cuda_driver_available,
    floor::{measure as cuda_floor, FloorReport as CudaFloorReport},
    nvrtc, source as cuda_source, CudaConfig, CudaDriver, CudaMode,
};
#[cfg(feature = "wgpu")]
pub use backend::wgpu::{
    adapters as wgpu_adapters, check as wgsl_check, shader_f64 as wgpu_shader_f64, ProgramEdit, WgpuConfig,
};
pub use backend::{Backend, BACKEND_ENV};
pub use behaviour::{AsBehaviour, BehaviourId, BehaviourSet, UserBehaviour};
pub use c_layout::{CField, CLayout};
pub use clock::{deadline_after, deadline_from};
pub use device::{
    CallTrace, CommandRequest, Device, DeviceConfig, DeviceFault, DeviceHealth, DeviceStamps, DeviceStats, EventHook,
    PendingCommand, Router, SlotActivity, SlotFault, SlotSender, SlotSnapshot, Unroutable, UnroutableHook,
    DEFAULT_HOLD_LIMIT, DEFAULT_SENDER_BATCH, DEFAULT_SENDER_DELAY, DEFAULT_SENDER_TIMEOUT, UNRESPONSIVE_AFTER,
};
pub use error::{DeviceCode, DeviceError};
pub use thread_slice::{request_thread_slice, DEFAULT_THREAD_SLICE};

/// The former name of [`SlotFault`].
#[deprecated(since = "0.2.0", note = "renamed `SlotFault` (aimed at a slot; `InjectedFault` aims at a name)")]
pub type Fault = SlotFault;
pub use codes::UnroutableReason;
pub use event::{CommandOp, DeviceEvent, EventKind, SlotEvent, SlotState, Undelivered, UndeliveredReason};
pub use message::{
    archive, check_payload, decode_archived, decode_pod, encode_archived, pod_bytes, routed_address, Archivable,
    Endpoint, Envelope, Reply, Unarchivable, PAYLOAD_BYTES,
};
pub use sync::Stream;
