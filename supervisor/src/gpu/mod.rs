//! GPU children, from the supervision side. A GPU child is not a ractor actor: its supervisor drives its
//! device slot directly (starts it, drains or kills it) and hears about its end through *notices* routed
//! from the device's event path and the watchdog, so a child costs a slot binding, not a task and a mailbox.
//!
//! - `slots.rs`: one device as the tree sees it (slot pool, who listens to each slot, event routing);
//! - `pool.rs`: free and quarantined slots;
//! - `incarnation.rs`: one incarnation of a GPU child (bring-up, drain or kill on stop, what its end means);
//! - `watchdog.rs`: the hung-actor detector of every GPU child on a device (one task per device);
//! - `claim.rs`: a child's hold on its slot (take, start an incarnation, clean up, give back);
//! - `quarantine.rs`: a wedged actor, from stuck to moved (the whole sequence in its module doc);
//! - `event_faults.rs`: dropped or delayed device events, for fault-injection tests.

pub(crate) mod claim;
mod event_faults;
pub(crate) mod incarnation;
mod pool;
pub(crate) mod quarantine;
pub(crate) mod slots;
mod watchdog;

use std::sync::Arc;

pub use event_faults::EventFault;

use ringvisor_device::DeviceCode;

use crate::reason::ExitReason;

/// Something the supervisor of a GPU child must hear about incarnation `generation` of `slot`.
#[derive(Debug)]
pub(crate) struct SlotNotice {
    /// Which device ([`slots::DeviceSlots::id`]): with several devices, slot numbers repeat.
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
