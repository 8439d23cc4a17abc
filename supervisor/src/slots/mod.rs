//! The devices of a tree as its GPU children's supervisors see them, below the handles and the supervisors: one
//! device's slots and who listens to each (`device.rs`), the notices that tell a supervisor what happened to its
//! child's incarnation, and where they come from.
//!
//! - `device.rs`: one device as the tree sees it (slot pool, who listens to each slot, the fan-out of its events
//!   to dead letters and notices);
//! - `pool.rs`: free and quarantined slots;
//! - `watchdog.rs`: the hung-actor detector of every GPU child on a device (one task per device);
//! - `event_faults.rs`: dropped or delayed device events, for fault-injection tests.

mod device;
mod event_faults;
mod pool;
mod watchdog;

use std::sync::Arc;

pub(crate) use device::DeviceSlots;
pub use event_faults::EventFault;

use ringvisor_device::DeviceCode;

use crate::reason::ExitReason;

/// Something the supervisor of a GPU child must hear about incarnation `generation` of `slot`.
#[derive(Debug)]
pub(crate) struct SlotNotice {
    /// Which device ([`DeviceSlots::id`]): with several devices, slot numbers repeat.
    pub(crate) device: u64,
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) what: Notice,
}

/// What happened to the incarnation.
#[derive(Debug)]
pub(crate) enum Notice {
    /// The device reported it failed (with the device's code).
    Failed(Option<DeviceCode>),
    /// The device killed it (a kill the supervisor did not ask for: a fault, a user's kill).
    Killed,
    /// The device drained it (it stopped after finishing its messages).
    Drained,
    /// The watchdog found it hung, or ended without an event: it exits with this reason.
    Hung(String),
    /// Read the slot's state once more: the incarnation may have failed before its supervisor listened.
    Recheck,
    /// Someone on the host asked it to exit with this reason (OTP's `exit(Pid, Reason)`).
    Exit(ExitReason),
    /// Its device was lost (one of several devices): it exits with reason `device_lost`.
    DeviceLost,
}

/// Where the notices of a supervisor's GPU children go (one per supervisor, shared by its children's slots).
pub(crate) type NoticeSink = Arc<dyn Fn(SlotNotice) + Send + Sync>;
