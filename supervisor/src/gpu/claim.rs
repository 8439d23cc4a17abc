//! A GPU child's hold on a device slot, from the supervisor's side: taking a slot when the child is added,
//! starting each incarnation in it, cleaning up a device actor no incarnation owns any more, and giving the
//! slot back when the child is dropped for good.

use std::sync::Arc;
use std::time::Duration;

use ringvisor_device::{
    BehaviourId, CommandOp, CommandRequest, Device, DeviceError, DeviceHealth, PendingCommand, SlotEvent, SlotState,
};

use super::incarnation::{self, StartArgs};
use super::quarantine::is_wedged;
use crate::child::GpuChild;
use crate::error::SupervisorError;
use crate::handle::{ChildShared, GpuActorShared};
use crate::policy::Placement;
use crate::services::Services;
use crate::slots::{DeviceSlots, NoticeSink};
use crate::tree_events::TreeEvent;

/// Takes a slot for GPU child `id` on the device its placement picks (the slot `child` asks for, or the
/// lowest free one), filing its dead letters under `target`.
pub(crate) fn take_slot(
    services: &Services,
    id: &str,
    child: &GpuChild,
    target: String,
) -> Result<(Arc<DeviceSlots>, u32), SupervisorError> {
    // A slot asked for without a device is a slot of the first device.
    let placement = match (child.wanted_slot(), child.wanted_placement()) {
        (Some(_), Placement::FewestInUse | Placement::RoundRobin) => Placement::Device(0),
        (_, placement) => placement,
    };
    let slots =
        services.place(placement, None).map_err(|why| SupervisorError::NoSlot(format!("GPU child `{id}`: {why}")))?;
    let slot = acquire(&slots, id, child.wanted_slot())?;
    slots.claim(slot, target);
    Ok((slots, slot))
}

fn acquire(slots: &DeviceSlots, id: &str, wanted: Option<u32>) -> Result<u32, SupervisorError> {
    slots.pool.acquire(wanted).ok_or_else(|| {
        SupervisorError::NoSlot(match wanted {
            Some(s) => format!("slot {s} of device {} for `{id}` is taken or out of range", slots.index),
            None => format!("no free slot on device {} for `{id}`", slots.index),
        })
    })
}

/// Before a GPU child whose device was lost starts again, it moves: if it fails over, to another device
/// its placement picks among those still running; otherwise (or if no other device has a free slot) to a
/// slot of the device that replaced the lost one at the same index, waited for up to its start timeout. Its
/// dead letters keep its name; the lost device's slot is let go with that device.
async fn move_off_lost_device(shared: &ChildShared, services: &Services, child: &GpuChild) -> Result<(), String> {
    let Some(gpu) = shared.gpu_actor.as_ref() else { return Ok(()) };
    let (old, old_slot) = gpu.home();
    if old.device.health() != DeviceHealth::Lost {
        return Ok(());
    }
    let id = &shared.id;
    let failover = child.fails_over().then(|| {
        let placement = match child.wanted_placement() {
            Placement::Device(_) => Placement::FewestInUse,
            other => other,
        };
        services.place(placement, Some(old.index)).ok()
    });
    let new = match failover.flatten() {
        Some(other) => other,
        None => services.replacement_of(&old, child.timeout()).await.ok_or_else(|| {
            format!(
                "device {} of GPU child `{id}` was lost and has not been replaced within its start timeout",
                old.index
            )
        })?,
    };
    // A slot asked for is a slot of its own device (or of the device that replaced it).
    let wanted = child.wanted_slot().filter(|_| new.index == old.index);
    let slot = acquire(&new, id, wanted).map_err(|e| e.to_string())?;
    let target = old.unclaim(old_slot).unwrap_or_else(|| shared.target());
    new.claim(slot, target);
    tracing::warn!(child = %id, from = old.index, to = new.index, slot, "GPU child moved off a lost device");
    services.events().emit(TreeEvent::DeviceMoved {
        child: id.clone(),
        from: (old.index, old_slot),
        to: (new.index, slot),
    });
    gpu.move_to_device(new, slot);
    Ok(())
}

/// Gives a slot taken by [`take_slot`] back (the child was never added, or is dropped for good).
pub(crate) fn release_slot(slots: &DeviceSlots, slot: u32) {
    slots.unclaim(slot);
    slots.pool.release(slot);
}

/// The device command that brings up a GPU child's next incarnation, submitted ahead of its turn so a group's
/// starts reach the device as one batch (see `terminate_children` / `start_children`).
pub(crate) struct PreparedStart {
    /// The init bytes the command carries (the incarnation's).
    pub(crate) init: Vec<u8>,
    pub(crate) pending: PendingCommand,
}

/// Submits the Create (or, for a Failed slot, the Restart) of GPU child `shared`'s next incarnation without
/// waiting for it. `None` when the slot is not in a state where that is unambiguous (running, quarantined, a
/// command in flight) or the submission fails: its start then brings the slot up itself, with its full
/// checks and errors.
pub(crate) fn prepare_incarnation(shared: &ChildShared, child: &GpuChild, init: Vec<u8>) -> Option<PreparedStart> {
    let (slots, slot) = shared.gpu_actor.as_ref()?.home();
    let device = &slots.device;
    let behaviour = behaviour_id(device, child).ok()?;
    if device.is_quarantined(slot) {
        return None;
    }
    let pending = match device.host_view(slot).ok()? {
        (_, SlotState::Dormant | SlotState::Terminated) => device.create(slot, behaviour, &init),
        (_, SlotState::Failed) => device.restart(slot, behaviour, &init),
        _ => return None,
    };
    Some(PreparedStart { init, pending: pending.ok()? })
}

/// Takes back a start submitted by [`prepare_incarnation`] that will not be used (an earlier sibling failed
/// to start, so this one must not run): waits for its outcome and kills what it brought up.
pub(crate) async fn cancel_prepared(shared: &ChildShared, prepared: PreparedStart, wait: Duration) {
    if prepared.pending.wait(wait).await.is_ok() {
        if let Some(gpu) = &shared.gpu_actor {
            stop_orphaned_slot(gpu);
        }
    }
}

/// The id of the child's behaviour on `device` (devices may be configured with different behaviours).
fn behaviour_id(device: &Device, child: &GpuChild) -> Result<BehaviourId, String> {
    device.behaviours().id(child.behaviour()).ok_or_else(|| format!("unknown behaviour `{}`", child.behaviour()))
}

/// Starts one incarnation of GPU child `shared`: creates (or re-creates) the device actor, or takes over the
/// command `prepared` already submitted, and waits until it is Active; its end is reported to `sink` (its
/// supervisor). Returns its generation.
pub(crate) async fn start_incarnation(
    shared: &Arc<ChildShared>,
    services: &Services,
    child: &GpuChild,
    init: Vec<u8>,
    prepared: Option<PendingCommand>,
    sink: &NoticeSink,
) -> Result<u32, String> {
    move_off_lost_device(shared, services, child).await?;
    let device = shared.gpu_actor.as_ref().ok_or("not a GPU child")?.device();
    let behaviour = behaviour_id(&device, child)?;
    let args =
        StartArgs { behaviour, init, prepared, start_timeout: child.timeout(), heartbeat_timeout: child.watchdog() };
    incarnation::start(shared, services.events(), sink, args).await
}

/// After a GPU child's incarnation has ended for its supervisor (however it ended): a device actor still
/// running (the host made it exit, or block 0 restarted it under a grant no incarnation will take) is killed
/// so it stops consuming messages.
pub(crate) fn stop_orphaned_slot(gpu: &GpuActorShared) {
    if kill_granted_restart(gpu) {
        return;
    }
    let (device, slot) = gpu.placed();
    let _ = kill_if_running(&device, slot);
}

/// Kills the device actor in `slot` if one runs there (`None` if none does).
fn kill_if_running(device: &Device, slot: u32) -> Option<Result<PendingCommand, DeviceError>> {
    match device.host_view(slot) {
        Ok((_, SlotState::Active | SlotState::Draining | SlotState::Initializing)) => Some(device.kill(slot)),
        _ => None,
    }
}

/// A GPU child whose supervisor is gone without stopping it (a killed supervisor): whatever runs in its slot
/// is killed (as [`stop_orphaned_slot`] does) and the slot given back. Returns true when that is left to a
/// follow-up task ([`settle`]) because the slot's actor has not stopped yet (a kill is on its way, or a command
/// of an interrupted start is in flight); the caller must then not give the slot back itself.
pub(crate) fn abandon_slot(gpu: &GpuActorShared) -> bool {
    if kill_granted_restart(gpu) {
        return false;
    }
    let (slots, slot) = gpu.home();
    let kill = kill_if_running(&slots.device, slot);
    settle_in_background(slots, slot, kill, true)
}

/// When a GPU child ends for good: a failed slot is killed so the messages still queued in it become dead
/// letters (a restart would have kept the ones sent after the failure), and so is an incarnation block 0
/// started under a grant. A slot whose actor has still not stopped (its kill not acknowledged yet) is settled
/// by a follow-up task ([`settle`]), so that a wedged actor is quarantined and its queued messages handed back
/// instead of waiting for their callers' deadlines. With `give_back`, the slot returns to the pool (after the
/// follow-up, if there is one).
pub(crate) fn retire_slot(gpu: &GpuActorShared, give_back: bool) {
    let (slots, slot) = gpu.home();
    if !kill_granted_restart(gpu) {
        let device = &slots.device;
        let kill = match device.host_view(slot) {
            Ok((_, SlotState::Failed)) => {
                let _ = device.kill(slot); // block 0 kills a failed slot itself: nothing to settle
                None
            }
            _ => kill_if_running(device, slot),
        };
        if settle_in_background(slots.clone(), slot, kill, give_back) {
            return;
        }
    }
    if give_back {
        release_slot(&slots, slot);
    }
}

/// Starts [`settle`] for `slot` after `kill` (what killing it returned: `None` if nothing ran there), then gives
/// the slot back if `give_back`. False when there is nothing to settle (nothing ran there, the kill was refused
/// for good, or there is no runtime to run the follow-up on).
fn settle_in_background(
    slots: Arc<DeviceSlots>,
    slot: u32,
    kill: Option<Result<PendingCommand, DeviceError>>,
    give_back: bool,
) -> bool {
    let pending = match kill {
        Some(Ok(pending)) => Some(pending),
        Some(Err(DeviceError::CommandInFlight { .. })) => None,
        None | Some(Err(_)) => return false,
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return false };
    let heartbeat = slots.device.snapshot(slot).map_or(0, |s| s.heartbeat);
    runtime.spawn(async move {
        settle(&slots, slot, pending, heartbeat).await;
        if give_back {
            release_slot(&slots, slot);
        }
    });
    true
}

/// Waits until the actor in `slot` has stopped: its kill (`pending`, or one submitted once the command in
/// flight is done) acknowledged. An actor that acknowledges nothing for [`ABANDONED_ACK_WAIT`] while its
/// heartbeat stands at `heartbeat` is wedged inside its behaviour: the slot is quarantined, which hands back
/// the messages queued there (their callers get dead letters instead of waiting for their deadlines).
async fn settle(slots: &DeviceSlots, slot: u32, mut pending: Option<PendingCommand>, heartbeat: u64) {
    let device = &slots.device;
    let since = tokio::time::Instant::now();
    loop {
        if let Some(kill) = pending.take() {
            if !matches!(kill.wait(ABANDONED_ACK_WAIT).await, Err(DeviceError::Timeout)) {
                return; // killed (or ended another way)
            }
        }
        let running = matches!(
            device.host_view(slot),
            Ok((_, SlotState::Active | SlotState::Draining | SlotState::Initializing))
        );
        if !running {
            return;
        }
        if since.elapsed() >= ABANDONED_ACK_WAIT && is_wedged(device, slot, heartbeat) {
            tracing::warn!(slot, "GPU actor wedged after its child ended: slot quarantined");
            slots.quarantine(slot);
            return;
        }
        match device.kill(slot) {
            Ok(kill) => pending = Some(kill),
            Err(DeviceError::CommandInFlight { .. }) => tokio::time::sleep(ABANDONED_POLL).await,
            // nothing left to kill, or the device is gone
            Err(_) => return,
        }
    }
}

/// How long a retired or abandoned slot's kill may go unacknowledged before a still heartbeat makes the actor
/// wedged (the default heartbeat timeout), and how often it is looked at meanwhile.
const ABANDONED_ACK_WAIT: Duration = crate::child::DEFAULT_HEARTBEAT_TIMEOUT;
const ABANDONED_POLL: Duration = Duration::from_millis(1);

/// A restart block 0 carries out under a grant that no incarnation will take: once it is done, the
/// incarnation it started (that generation only) is killed. False if there was none.
fn kill_granted_restart(gpu: &GpuActorShared) -> bool {
    let (device, slot) = gpu.placed();
    let Some(restart) = device.take_granted_restart(slot) else { return false };
    let kill = move |started: Result<SlotEvent, DeviceError>| {
        if let Ok(started) = started {
            let _ = device.submit(CommandRequest {
                op: CommandOp::Kill,
                slot,
                expected_generation: Some(started.event.generation),
                behaviour: None,
                init: Vec::new(),
            });
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(async move { kill(restart.wait(GRANTED_RESTART_WAIT).await) })),
        Err(_) => kill(restart.wait_blocking(GRANTED_RESTART_WAIT)),
    }
    true
}

/// How long a granted restart may take before the host stops waiting to kill what it started.
const GRANTED_RESTART_WAIT: Duration = Duration::from_secs(5);
