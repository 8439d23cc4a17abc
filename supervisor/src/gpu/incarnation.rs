//! One incarnation of a GPU child, driven by its supervisor (no actor of its own): bring-up (the device actor
//! created or re-created and Active), the stop by the child's shutdown spec (a drain, bounded, or a kill),
//! and what a notice about it means as an exit reason.

use std::time::{Duration, Instant};

use ringvisor_device::{
    BehaviourId, Device, DeviceCode, DeviceError, EventKind, PendingCommand, SlotEvent, SlotFault, SlotState, Stream,
};

use super::quarantine::{is_wedged, move_off_quarantined};
use crate::handle::{ChildShared, GpuActorShared};
use crate::reason::ExitReason;
use crate::slots::{Notice, NoticeSink, SlotNotice};
use crate::tree_events::TreeEvents;

/// What one start of a GPU child needs.
pub(crate) struct StartArgs {
    pub(crate) behaviour: BehaviourId,
    pub(crate) init: Vec<u8>,
    /// The Create/Restart already submitted for this incarnation (a pipelined group start), if any.
    pub(crate) prepared: Option<PendingCommand>,
    pub(crate) start_timeout: Duration,
    pub(crate) heartbeat_timeout: Option<Duration>,
}

/// Wait between attempts to submit a command while another is in flight on the slot.
const POLL: Duration = Duration::from_millis(1);
/// Longest wait for a slot event before a stopping incarnation's slot is read again.
const DRAIN_RECHECK: Duration = Duration::from_millis(20);

/// Brings up one incarnation of GPU child `shared`: creates (or re-creates) the device actor, or takes over
/// the start already submitted for it (`args.prepared`, or a restart block 0 carries out under a grant), and
/// waits until it is Active. From then on its end reaches `sink`. Returns its generation.
pub(crate) async fn start(
    shared: &ChildShared,
    events: &TreeEvents,
    sink: &NoticeSink,
    mut args: StartArgs,
) -> Result<u32, String> {
    let gpu = shared.gpu_actor.as_ref().ok_or("not a GPU child")?;
    let (slots, mut slot) = gpu.home();
    let device = slots.device.clone();
    let deadline = ringvisor_device::deadline_after(args.start_timeout);
    // A running device actor must acknowledge the kill its restart needs within this bound.
    let ack_wait = args.heartbeat_timeout.unwrap_or(args.start_timeout).min(args.start_timeout);
    let generation = loop {
        if device.is_quarantined(slot) {
            slot = move_off_quarantined(shared, events, slot)?;
        }
        // Listen first: a failure right after creation must reach the supervisor.
        slots.attach(slot, sink);
        // A start submitted ahead (a group start), or a restart block 0 already carries out (a grant).
        let prepared = args.prepared.take().or_else(|| device.take_granted_restart(slot));
        let submitted_early = prepared.is_some();
        match bring_up(&device, slot, &args, prepared, deadline, ack_wait).await {
            Ok(Some(generation)) => {
                // Its failure may have been routed before anyone listened: look once more, in turn.
                if submitted_early
                    && device.host_view(slot).is_ok_and(|(g, s)| g == generation && s == SlotState::Failed)
                {
                    sink(SlotNotice { device: slots.id, slot, generation, what: Notice::Recheck });
                }
                break generation;
            }
            Ok(None) => {
                slots.detach(slot);
                tracing::warn!(child = %shared.id, slot, "GPU actor wedged: slot quarantined");
                slots.quarantine(slot);
            }
            Err(e) => {
                slots.detach(slot);
                return Err(e);
            }
        }
    };
    // An injected hang (the stall bit) belonged to the previous incarnation.
    let _ = device.inject(slot, SlotFault::ClearStall);
    tracing::debug!(child = %shared.id, slot, generation, "GPU actor active");
    if let Some(timeout) = args.heartbeat_timeout {
        let tree_device = std::sync::Arc::downgrade(&slots);
        let device = move || tree_device.upgrade().map(|s| s.device.clone());
        slots.watchdogs.watch(device, slot, generation, timeout, sink.clone(), shared.id.clone());
    }
    Ok(generation)
}

/// Creates (or re-creates) the device actor in `slot` and waits until it is Active; returns its generation.
/// `Ok(None)`: the slot's running actor is wedged: it acknowledged neither the restart nor an earlier
/// command within `ack_wait` while its heartbeat stood still on a device that is otherwise running.
/// `prepared`: the command already submitted for it (the slot was not running), waited for instead.
async fn bring_up(
    device: &Device,
    slot: u32,
    args: &StartArgs,
    prepared: Option<PendingCommand>,
    deadline: Instant,
    ack_wait: Duration,
) -> Result<Option<u32>, String> {
    let ack_deadline = ringvisor_device::deadline_after(ack_wait).min(deadline);
    // The heartbeat before the start: a running actor that does not move it while its kill waits is wedged.
    let heartbeat = match prepared {
        Some(_) => 0, // submitted for a slot that was not running: nothing to acknowledge
        None => device.snapshot(slot).map_err(|e| e.to_string())?.heartbeat,
    };
    let (pending, running) = if let Some(pending) = prepared {
        (pending, false)
    } else {
        match submit_start(device, slot, args, heartbeat, ack_deadline).await? {
            Some(submitted) => submitted,
            None => return Ok(None),
        }
    };
    let wait_until = if running { ack_deadline } else { deadline };
    match pending.wait(wait_until.saturating_duration_since(Instant::now())).await {
        Ok(ev) if matches!(ev.event.kind, EventKind::Created | EventKind::Restarted) => Ok(Some(ev.event.generation)),
        Ok(ev) => Err(format!("device refused the start: {:?} ({:?})", ev.event.kind, ev.event.code)),
        Err(DeviceError::Timeout) if running && is_wedged(device, slot, heartbeat) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Submits the Create (slot not running) or Restart (running: the actor must acknowledge the kill) of a
/// slot, retrying while another command is in flight on it until `ack_deadline`. Returns the command and
/// whether the slot was running; `Ok(None)`: the running actor is wedged (see [`bring_up`]).
async fn submit_start(
    device: &Device,
    slot: u32,
    args: &StartArgs,
    heartbeat: u64,
    ack_deadline: Instant,
) -> Result<Option<(PendingCommand, bool)>, String> {
    loop {
        let (_, state) = device.host_view(slot).map_err(|e| e.to_string())?;
        let running = !matches!(state, SlotState::Dormant | SlotState::Terminated);
        let submitted = if running {
            device.restart(slot, args.behaviour, &args.init)
        } else {
            device.create(slot, args.behaviour, &args.init)
        };
        match submitted {
            Err(DeviceError::CommandInFlight { .. }) if Instant::now() < ack_deadline => tokio::time::sleep(POLL).await,
            Err(DeviceError::CommandInFlight { .. }) if is_wedged(device, slot, heartbeat) => return Ok(None),
            Err(e) => return Err(e.to_string()),
            Ok(pending) => return Ok(Some((pending, running))),
        }
    }
}

/// The exit a notice about the running incarnation means; `None` if it does not end it (a re-read that
/// found it still running).
pub(crate) fn exit_reason(shared: &ChildShared, notice: SlotNotice) -> Option<ExitReason> {
    let failed = |code: Option<DeviceCode>| {
        let code = code.map(|c| format!("{c:?}")).unwrap_or_else(|| "unknown".into());
        ExitReason::Abnormal(format!("GPU actor `{}` (slot {}) failed: {code}", shared.id, notice.slot))
    };
    match notice.what {
        Notice::Failed(code) => Some(failed(code)),
        Notice::Killed => Some(ExitReason::Killed),
        Notice::Drained => Some(ExitReason::Normal),
        Notice::Hung(reason) => Some(ExitReason::Abnormal(reason)),
        Notice::Exit(reason) => Some(reason),
        Notice::DeviceLost => Some(ExitReason::Abnormal(crate::reason::stop_reason::DEVICE_LOST.to_string())),
        Notice::Recheck => {
            let device = shared.gpu_actor.as_ref()?.device();
            let snap = device.snapshot(notice.slot).ok()?;
            (snap.generation == notice.generation && snap.state == SlotState::Failed).then(|| failed(snap.last_error))
        }
    }
}

/// A GPU incarnation asked to stop (drained gracefully, or killed), whose end is still to be waited for.
pub(crate) struct Stopping {
    slot: u32,
    generation: u32,
    kill: bool,
    /// The slot's events, to wake on the drain's end (`None` for a kill, or if they cannot be had).
    events: Option<Stream<SlotEvent>>,
}

/// The supervisor stops listening to incarnation `generation` of `gpu`'s slot (it is being stopped, or has
/// ended): neither its events nor the watchdog report it any more.
pub(crate) fn forget(gpu: &GpuActorShared, generation: u32) {
    let (slots, slot) = gpu.home();
    slots.detach(slot);
    slots.watchdogs.unwatch(slot, generation);
}

/// Asks incarnation `generation` of `gpu`'s slot (no longer listened to, see [`forget`]) to stop: a drain,
/// where it finishes the messages it has, unless `kill` (the caller kills the slot: no drain).
pub(crate) fn begin_stop(gpu: &GpuActorShared, generation: u32, kill: bool) -> Stopping {
    let slot = gpu.slot();
    if kill {
        return Stopping { slot, generation, kill, events: None };
    }
    let device = gpu.device();
    let events = device.subscribe_slot(slot).ok();
    let _ = request_drain(&device, slot, generation);
    Stopping { slot, generation, kill, events }
}

/// Asks the device to drain incarnation `generation` of `slot` if it is Active; true when it has ended
/// already (or nothing is left to drain: a lost device, a quarantined slot).
fn request_drain(device: &Device, slot: u32, generation: u32) -> bool {
    let Ok((g, state)) = device.host_view(slot) else { return true };
    if g != generation {
        return true;
    }
    match state {
        SlotState::Active => match device.drain(slot) {
            Ok(_) | Err(DeviceError::CommandInFlight { .. }) => false,
            Err(_) => true,
        },
        SlotState::Draining | SlotState::Initializing => false,
        SlotState::Terminated | SlotState::Failed | SlotState::Dormant => true,
    }
}

/// Waits for the stop [`begin_stop`] asked for, until `deadline` (`None`: no limit): `Shutdown` once the
/// drain has ended, `Killed` for a kill or past the deadline (the caller then kills the device actor).
pub(crate) async fn finish_stop(gpu: &GpuActorShared, stopping: Stopping, deadline: Option<Instant>) -> ExitReason {
    if stopping.kill {
        return ExitReason::Killed;
    }
    let device = gpu.device();
    loop {
        if request_drain(&device, stopping.slot, stopping.generation) {
            return ExitReason::Shutdown;
        }
        let mut wait = DRAIN_RECHECK;
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return ExitReason::Killed;
            }
            wait = wait.min(left);
        }
        // Wake on the slot's next event (the drain finishing), or re-read after a while. A closed stream is
        // a device shut down or lost under the drain: nothing will finish it.
        match &stopping.events {
            Some(events) => {
                if let Ok(None) = tokio::time::timeout(wait, events.recv()).await {
                    return ExitReason::Shutdown;
                }
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}
