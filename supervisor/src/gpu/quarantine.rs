//! A wedged GPU actor and its slot: the sequence from "stuck" to "moved".
//!
//! A GPU block cannot be preempted: an actor spinning inside its behaviour never acknowledges a kill. The
//! evidence is gathered where it is seen, and each step lives in one place:
//! 1. the device's watchdog (`watchdog.rs`) fails the child when its heartbeat stands
//!    still while messages wait (never while the whole device is unresponsive: that is the device's own
//!    watchdog's call, see `ringvisor_device::UNRESPONSIVE_AFTER`);
//! 2. the supervisor restarts it; the new incarnation's start asks the device to restart the slot
//!    (`incarnation.rs`, `bring_up`), and waits at most the child's heartbeat timeout for the acknowledgement;
//! 3. unacknowledged, with the slot's heartbeat where it was and block 0's moving ([`is_wedged`]), the slot is
//!    given up on: [`DeviceSlots::quarantine`] has the device refuse it for good (its queued messages become
//!    dead letters with reason `slot_quarantined`) and the pool never hands it out again on this device;
//! 4. the child moves to a free slot ([`move_off_quarantined`], a `SlotQuarantined` tree event); its handles
//!    follow it (`GpuActorRef::slot` is the current slot);
//! 5. past `RuntimeBuilder::quarantine_limit` quarantined slots the runtime restarts the device, which gives
//!    every slot back.

use ringvisor_device::{Device, DeviceHealth, SlotState};

use crate::handle::ChildShared;
use crate::slots::DeviceSlots;
use crate::tree_events::{TreeEvent, TreeEvents};

impl DeviceSlots {
    /// Gives up on `slot` (its actor never acknowledged a kill): the device quarantines it (its queued
    /// messages become dead letters) and the pool never hands it out again on this device.
    pub(crate) fn quarantine(&self, slot: u32) {
        self.pool.quarantine(slot);
        if let Err(e) = self.device.quarantine(slot) {
            tracing::warn!(slot, error = %e, "device could not quarantine the slot");
        }
        metrics::counter!("ringvisor_quarantined_slots_total").increment(1);
        metrics::gauge!("ringvisor_quarantined_slots").set(self.pool.quarantined().len() as f64);
    }

    /// Moves a child off quarantined slot `from` to a free slot (its dead letters keep its name); returns
    /// the new slot, or `None` if no slot is free.
    pub(crate) fn relocate(&self, from: u32) -> Option<u32> {
        let to = self.pool.acquire(None)?;
        let target = self.unclaim(from).unwrap_or_default();
        self.claim(to, target);
        Some(to)
    }
}

/// The slot's actor is stuck: still running (or still initialising: an init that never returns holds its
/// block the same way), its heartbeat where it was, while the device itself answers.
pub(crate) fn is_wedged(device: &Device, slot: u32, heartbeat: u64) -> bool {
    device.health() == DeviceHealth::Running
        && device.snapshot(slot).is_ok_and(|s| {
            s.heartbeat == heartbeat
                && matches!(s.state, SlotState::Active | SlotState::Draining | SlotState::Initializing)
        })
}

/// Moves the child off quarantined slot `from` to a free slot of the same device, and reports it.
pub(crate) fn move_off_quarantined(shared: &ChildShared, events: &TreeEvents, from: u32) -> Result<u32, String> {
    let gpu = shared.gpu_actor.as_ref().ok_or("not a GPU child")?;
    let to = gpu.home().0.relocate(from);
    events.emit(TreeEvent::SlotQuarantined { child: shared.id.clone(), slot: from, to });
    let to = to.ok_or_else(|| format!("slot {from} is quarantined and no free slot is left to move to"))?;
    tracing::warn!(child = %shared.id, from, to, "GPU child moved off a quarantined slot");
    gpu.move_to(to);
    Ok(to)
}
