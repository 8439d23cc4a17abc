//! GPU children, from the supervision side: each is a slot actor (ractor) over one device slot.
//!
//! - `slots.rs`: one device as the tree sees it (slot pool, who listens to each slot, event routing);
//! - `pool.rs`: free and quarantined slots;
//! - `slot_actor.rs`: the slot actor (bring-up, drain on stop, failure);
//! - `watchdog.rs`: the hung-actor detector of every GPU child on a device (one task per device);
//! - `claim.rs`: a child's hold on its slot (take, start an incarnation, clean up, give back);
//! - `quarantine.rs`: a wedged actor, from stuck to moved (the whole sequence in its module doc);
//! - `event_faults.rs`: dropped or delayed device events, for fault-injection tests.

pub(crate) mod claim;
mod event_faults;
mod pool;
pub(crate) mod quarantine;
mod slot_actor;
pub(crate) mod slots;
mod watchdog;

pub use event_faults::EventFault;

use ringvisor_device::DeviceEvent;

/// Messages of a slot actor: the device events of its slot, and the watchdog's verdicts.
#[derive(Debug)]
pub enum SlotMsg {
    /// A device event for the slot, routed by the tree's event hook.
    Device(DeviceEvent),
    /// The device's watchdog found the incarnation hung, or ended without an event: fail with this reason.
    Hung(String),
    /// Read the slot's state once more: its incarnation may have failed before the slot actor listened.
    Recheck,
}
