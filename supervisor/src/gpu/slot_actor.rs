//! The slot actor: the ractor actor that mirrors one GPU actor slot on the host and owns its control block.
//! Starting it creates (or re-creates) the device actor and waits until it is Active; stopping it drains
//! the slot; a device failure of its incarnation makes it fail, so its supervisor sees the failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use ringvisor_device::{BehaviourId, Device, DeviceCode, DeviceError, EventKind, PendingCommand, SlotState};

use super::quarantine::{is_wedged, move_off_quarantined};
use super::SlotMsg;
use crate::handle::ChildShared;
use crate::reason::stop_reason;
use crate::tree_events::TreeEvents;

pub(crate) struct SlotActor;

pub(crate) struct SlotArgs {
    pub(crate) shared: Arc<ChildShared>,
    pub(crate) events: TreeEvents,
    pub(crate) behaviour: BehaviourId,
    pub(crate) init: Vec<u8>,
    /// The Create/Restart already submitted for this incarnation (a pipelined group start), if any.
    pub(crate) prepared: Option<PendingCommand>,
    pub(crate) start_timeout: Duration,
    pub(crate) heartbeat_timeout: Option<Duration>,
}

pub(crate) struct SlotActorState {
    shared: Arc<ChildShared>,
    slot: u32,
    generation: u32,
}

/// Wait between attempts to submit a command while another is in flight on the slot.
const POLL: Duration = Duration::from_millis(1);
/// Longest wait for a slot event before a stopping slot actor re-reads the slot's state.
const DRAIN_RECHECK: Duration = Duration::from_millis(20);

impl Actor for SlotActor {
    type Msg = SlotMsg;
    type State = SlotActorState;
    type Arguments = SlotArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SlotMsg>,
        mut args: SlotArgs,
    ) -> Result<SlotActorState, ActorProcessingErr> {
        let gpu = args.shared.gpu_actor.as_ref().ok_or("not a GPU child")?;
        let slots = gpu.slots.clone();
        let device = slots.device.clone();
        let deadline = Instant::now() + args.start_timeout;
        // A running device actor must acknowledge the kill its restart needs within this bound.
        let ack_wait = args.heartbeat_timeout.unwrap_or(args.start_timeout).min(args.start_timeout);
        let mut slot = gpu.slot();
        let generation = loop {
            if device.is_quarantined(slot) {
                slot = move_off_quarantined(&args.shared, &args.events, slot)?;
            }
            // Attach first: a failure right after creation must reach this actor.
            slots.attach(slot, myself.clone());
            // A start submitted ahead (a group start), or a restart block 0 already carries out (a grant).
            let prepared = args.prepared.take().or_else(|| device.take_granted_restart(slot));
            let submitted_early = prepared.is_some();
            match bring_up(&device, slot, &args, prepared, deadline, ack_wait).await {
                Ok(Some(generation)) if submitted_early => {
                    // Its failure may have been routed before this actor listened: look once more.
                    if device.host_view(slot).is_ok_and(|(g, s)| g == generation && s == SlotState::Failed) {
                        let _ = myself.send_message(SlotMsg::Recheck);
                    }
                    break generation;
                }
                Ok(Some(generation)) => break generation,
                Ok(None) => {
                    slots.detach(slot, &myself);
                    tracing::warn!(child = %args.shared.id, slot, "GPU actor wedged: slot quarantined");
                    slots.quarantine(slot);
                }
                Err(e) => {
                    slots.detach(slot, &myself);
                    return Err(e.into());
                }
            }
        };
        // An injected hang (the stall bit) belonged to the previous incarnation.
        let _ = device.inject(slot, ringvisor_device::SlotFault::ClearStall);
        tracing::debug!(child = %args.shared.id, slot, generation, "GPU actor active");
        if let Some(timeout) = args.heartbeat_timeout {
            let id = args.shared.id.to_string();
            let tree_device = Arc::downgrade(&slots);
            let device = move || tree_device.upgrade().map(|s| s.device.clone());
            slots.watchdogs.watch(device, slot, generation, timeout, myself.clone(), id);
        }
        Ok(SlotActorState { shared: args.shared, slot, generation })
    }

    async fn handle(
        &self,
        myself: ActorRef<SlotMsg>,
        msg: SlotMsg,
        state: &mut SlotActorState,
    ) -> Result<(), ActorProcessingErr> {
        let ev = match msg {
            SlotMsg::Device(ev) => ev,
            SlotMsg::Hung(reason) => return Err(reason.into()),
            SlotMsg::Recheck => return state.check_failed(),
        };
        if ev.generation != state.generation {
            return Ok(()); // another incarnation's event
        }
        match ev.kind {
            EventKind::Failed => return Err(state.failure(ev.code)),
            EventKind::Killed => myself.stop(Some(stop_reason::KILLED.into())),
            EventKind::Drained => myself.stop(Some(stop_reason::NORMAL.into())),
            // A lost device is restarted as a whole (the runtime's one_for_all over device and tree); the
            // child does not fail on its own, which would only make every supervisor exceed its intensity.
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(&self, myself: ActorRef<SlotMsg>, state: &mut SlotActorState) -> Result<(), ActorProcessingErr> {
        let Some(gpu) = state.shared.gpu_actor.as_ref() else { return Ok(()) };
        gpu.slots.watchdogs.unwatch(state.slot, &myself);
        gpu.slots.detach(state.slot, &myself);
        // A graceful stop drains the slot: the actor finishes the messages it has. The supervisor bounds
        // the wait with the child's shutdown spec (and kills the slot if it runs out).
        let device = gpu.device();
        let events = device.subscribe_slot(state.slot)?;
        loop {
            let (generation, slot_state) = device.host_view(state.slot)?;
            if generation != state.generation {
                return Ok(());
            }
            match slot_state {
                SlotState::Active => match device.drain(state.slot) {
                    Ok(_) | Err(DeviceError::CommandInFlight { .. }) => {}
                    // Nothing left to drain on a lost device or a quarantined slot.
                    Err(DeviceError::DeviceLost | DeviceError::Quarantined { .. } | DeviceError::Closed) => {
                        return Ok(())
                    }
                    Err(e) => return Err(e.into()),
                },
                SlotState::Draining | SlotState::Initializing => {}
                SlotState::Terminated | SlotState::Failed | SlotState::Dormant => return Ok(()),
            }
            // Wake on the slot's next event (the drain finishing), or re-check after a while. A closed stream
            // is a device shut down or lost under the drain: nothing will finish it.
            if let Ok(None) = tokio::time::timeout(DRAIN_RECHECK, events.recv()).await {
                return Ok(());
            }
        }
    }
}

/// Creates (or re-creates) the device actor in `slot` and waits until it is Active; returns its generation.
/// `Ok(None)`: the slot's running actor is wedged: it acknowledged neither the restart nor an earlier
/// command within `ack_wait` while its heartbeat stood still on a device that is otherwise running.
/// `prepared`: the command already submitted for it (the slot was not running), waited for instead.
async fn bring_up(
    device: &Device,
    slot: u32,
    args: &SlotArgs,
    prepared: Option<PendingCommand>,
    deadline: Instant,
    ack_wait: Duration,
) -> Result<Option<u32>, String> {
    let heartbeat = device.snapshot(slot).map_err(|e| e.to_string())?.heartbeat;
    let ack_deadline = (Instant::now() + ack_wait).min(deadline);
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
    args: &SlotArgs,
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

impl SlotActorState {
    /// The exit reason of an incarnation that failed with `code`.
    fn failure(&self, code: Option<DeviceCode>) -> ActorProcessingErr {
        let code = code.map(|c| format!("{c:?}")).unwrap_or_else(|| "unknown".into());
        format!("GPU actor `{}` (slot {}) failed: {code}", self.shared.id, self.slot).into()
    }

    /// Fails the actor if its incarnation has already failed (its event may have been routed before the
    /// actor listened).
    fn check_failed(&self) -> Result<(), ActorProcessingErr> {
        let Some(gpu) = self.shared.gpu_actor.as_ref() else { return Ok(()) };
        let snap = gpu.device().snapshot(self.slot)?;
        if snap.generation == self.generation && snap.state == SlotState::Failed {
            return Err(self.failure(snap.last_error));
        }
        Ok(())
    }
}
