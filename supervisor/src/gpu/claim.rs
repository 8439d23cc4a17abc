//! A GPU child's hold on a device slot, from the supervisor's side: taking a slot when the child is added,
//! starting a slot actor over it for each incarnation, cleaning up a device actor its slot actor left behind,
//! and giving the slot back when the child is dropped for good.

use std::sync::Arc;

use ractor::{Actor, ActorCell};
use ringvisor_device::SlotState;

use super::slot_actor::{SlotActor, SlotArgs};
use super::slots::DeviceSlots;
use crate::child::{spawn_error, GpuChild};
use crate::error::SupervisorError;
use crate::handle::{ChildShared, GpuActorShared};
use crate::services::Services;

/// Takes a slot for GPU child `id` (the one `child` asks for, or the lowest free one) on the tree's current
/// device, filing its dead letters under `target`.
pub(crate) fn take_slot(
    services: &Services,
    id: &str,
    child: &GpuChild,
    target: String,
) -> Result<(Arc<DeviceSlots>, u32), SupervisorError> {
    let slots = services
        .device_slots()
        .ok_or_else(|| SupervisorError::NoSlot(format!("GPU child `{id}` needs a runtime with a device")))?;
    let slot = slots.pool.acquire(child.wanted_slot()).ok_or_else(|| {
        SupervisorError::NoSlot(match child.wanted_slot() {
            Some(s) => format!("slot {s} for `{id}` is taken or out of range"),
            None => format!("no free slot for `{id}`"),
        })
    })?;
    slots.claim(slot, target);
    Ok((slots, slot))
}

/// Gives a slot taken by [`take_slot`] back (the child was never added, or is dropped for good).
pub(crate) fn release_slot(slots: &DeviceSlots, slot: u32) {
    slots.unclaim(slot);
    slots.pool.release(slot);
}

/// Starts one incarnation of GPU child `shared`: a slot actor linked to `supervisor` that creates (or
/// re-creates) the device actor and is running once it is Active.
pub(crate) async fn start_incarnation(
    shared: &Arc<ChildShared>,
    services: &Services,
    child: &GpuChild,
    init: Vec<u8>,
    supervisor: ActorCell,
) -> Result<ActorCell, String> {
    let behaviour = match services.device().map(|d| d.behaviours().id(child.behaviour())) {
        Some(Some(b)) => b,
        Some(None) => return Err(format!("unknown behaviour `{}`", child.behaviour())),
        None => return Err("no device attached to this supervision tree".to_string()),
    };
    let args = SlotArgs {
        shared: shared.clone(),
        events: services.events().clone(),
        behaviour,
        init,
        start_timeout: child.timeout(),
        heartbeat_timeout: child.watchdog(),
    };
    SlotActor::spawn_linked(None, SlotActor, args, supervisor).await.map(|(r, _)| r.get_cell()).map_err(spawn_error)
}

/// After a GPU child's slot actor has exited (however it exited): a device actor still running (its slot
/// actor was killed) is killed so it stops consuming messages.
pub(crate) fn stop_orphaned_slot(gpu: &GpuActorShared) {
    let (device, slot) = (gpu.device(), gpu.slot());
    if let Ok((_, SlotState::Active | SlotState::Draining | SlotState::Initializing)) = device.host_view(slot) {
        let _ = device.kill(slot);
    }
}

/// When a GPU child ends for good: a failed slot is killed so the messages still queued in it become dead
/// letters (a restart would have kept the ones sent after the failure).
pub(crate) fn retire_slot(gpu: &GpuActorShared) {
    let (device, slot) = (gpu.device(), gpu.slot());
    if let Ok((_, SlotState::Failed)) = device.host_view(slot) {
        let _ = device.kill(slot);
    }
}
