//! The slot actor: the ractor actor that mirrors one GPU actor slot on the host and owns its control block.
//! Starting it creates (or re-creates) the device actor and waits until it is Active; stopping it drains
//! the slot; a device failure of its incarnation makes it fail, so its supervisor sees the failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use ringvisor_device::{BehaviourId, DeviceError, DeviceEvent, EventKind, PendingCommand, SlotState};

use crate::handle::ChildShared;
use crate::reason::stop_reason;
use crate::services::Services;

/// Messages of a slot actor: the device events of its slot, and the watchdog's ticks.
#[derive(Debug)]
pub enum SlotMsg {
    /// A device event for the slot, routed by the services' event hook.
    Device(DeviceEvent),
    /// Time to check the slot's heartbeat.
    Watchdog,
}

pub(crate) struct SlotActor;

pub(crate) struct SlotArgs {
    pub(crate) shared: Arc<ChildShared>,
    pub(crate) services: Services,
    pub(crate) behaviour: BehaviourId,
    pub(crate) init: Vec<u8>,
    pub(crate) start_timeout: Duration,
    pub(crate) heartbeat_timeout: Option<Duration>,
}

pub(crate) struct SlotActorState {
    shared: Arc<ChildShared>,
    services: Services,
    slot: u32,
    generation: u32,
    watchdog: Option<Watchdog>,
}

/// The hung-actor detector: the heartbeat the device last showed, and since when, while work was pending.
struct Watchdog {
    timeout: Duration,
    heartbeat: u64,
    since: Instant,
    /// Since when the device has shown this incarnation ended (Failed/Terminated) without the host hearing.
    ended_since: Option<Instant>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

/// Wait between attempts to submit a command while another is in flight on the slot.
const POLL: Duration = Duration::from_millis(1);
/// Longest wait for a slot event before a stopping slot actor re-reads the slot's state.
const DRAIN_RECHECK: Duration = Duration::from_millis(20);

/// Submits a command, retrying while an earlier command on the slot is still in flight.
async fn submit_when_free(
    deadline: Instant,
    mut submit: impl FnMut() -> Result<PendingCommand, DeviceError>,
) -> Result<PendingCommand, DeviceError> {
    loop {
        match submit() {
            Err(DeviceError::CommandInFlight { .. }) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
            other => return other,
        }
    }
}

impl Actor for SlotActor {
    type Msg = SlotMsg;
    type State = SlotActorState;
    type Arguments = SlotArgs;

    async fn pre_start(&self, myself: ActorRef<SlotMsg>, args: SlotArgs) -> Result<SlotActorState, ActorProcessingErr> {
        let gpu = args.services.gpu().ok_or("no device attached to this supervision tree")?;
        let slot = args.shared.gpu.as_ref().ok_or("not a GPU child")?.slot;
        let device = gpu.device.clone();
        let deadline = Instant::now() + args.start_timeout;
        // Attach first: a failure right after creation must reach this actor.
        gpu.attach(slot, myself.clone());
        let started = async {
            let pending = submit_when_free(deadline, || {
                let (_, state) = device.host_view(slot)?;
                match state {
                    SlotState::Dormant | SlotState::Terminated => device.create(slot, args.behaviour, &args.init),
                    _ => device.restart(slot, args.behaviour, &args.init),
                }
            })
            .await?;
            pending.wait(deadline.saturating_duration_since(Instant::now())).await
        }
        .await;
        let generation = match started {
            Ok(ev) if matches!(ev.event.kind, EventKind::Created | EventKind::Restarted) => ev.event.generation,
            Ok(ev) => {
                gpu.detach(slot, &myself);
                return Err(format!("device refused the start: {:?} ({:?})", ev.event.kind, ev.event.code).into());
            }
            Err(e) => {
                gpu.detach(slot, &myself);
                return Err(e.to_string().into());
            }
        };
        // An injected hang (the stall bit) belonged to the previous incarnation.
        let _ = device.inject(slot, ringvisor_device::Fault::ClearStall);
        tracing::debug!(child = %args.shared.id, slot, generation, "GPU actor active");
        let watchdog = args.heartbeat_timeout.map(|timeout| Watchdog {
            timeout,
            heartbeat: 0,
            since: Instant::now(),
            ended_since: None,
            ticker: Some(myself.send_interval(timeout / 4, || SlotMsg::Watchdog)),
        });
        Ok(SlotActorState { shared: args.shared, services: args.services, slot, generation, watchdog })
    }

    async fn handle(
        &self,
        myself: ActorRef<SlotMsg>,
        msg: SlotMsg,
        state: &mut SlotActorState,
    ) -> Result<(), ActorProcessingErr> {
        let ev = match msg {
            SlotMsg::Device(ev) => ev,
            SlotMsg::Watchdog => return state.check_heartbeat(),
        };
        if ev.generation != state.generation {
            return Ok(()); // another incarnation's event
        }
        match ev.kind {
            EventKind::Failed => {
                let code = ev.code.map(|c| format!("{c:?}")).unwrap_or_else(|| "unknown".into());
                return Err(format!("GPU actor `{}` (slot {}) failed: {code}", state.shared.id, state.slot).into());
            }
            EventKind::Killed => myself.stop(Some(stop_reason::KILLED.into())),
            EventKind::Drained => myself.stop(Some(stop_reason::NORMAL.into())),
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(&self, myself: ActorRef<SlotMsg>, state: &mut SlotActorState) -> Result<(), ActorProcessingErr> {
        if let Some(ticker) = state.watchdog.as_mut().and_then(|w| w.ticker.take()) {
            ticker.abort();
        }
        let Some(gpu) = state.services.gpu() else { return Ok(()) };
        gpu.detach(state.slot, &myself);
        // A graceful stop drains the slot: the actor finishes the messages it has. The supervisor bounds
        // the wait with the child's shutdown spec (and kills the slot if it runs out).
        let device = &gpu.device;
        let events = device.subscribe_slot(state.slot)?;
        loop {
            let (generation, slot_state) = device.host_view(state.slot)?;
            if generation != state.generation {
                return Ok(());
            }
            match slot_state {
                SlotState::Active => match device.drain(state.slot) {
                    Ok(_) | Err(DeviceError::CommandInFlight { .. }) => {}
                    Err(e) => return Err(e.into()),
                },
                SlotState::Draining | SlotState::Initializing => {}
                SlotState::Terminated | SlotState::Failed | SlotState::Dormant => return Ok(()),
            }
            // Wake on the slot's next event (the drain finishing), or re-check after a while.
            let _ = tokio::time::timeout(DRAIN_RECHECK, events.recv()).await;
        }
    }
}

impl SlotActorState {
    /// Fails the actor if its device actor is hung: the heartbeat has not moved for the timeout while
    /// messages wait in its inbox. (Its supervisor then kills the device actor, which a stalled actor
    /// acknowledges; a behaviour stuck inside a call would not: that is the quarantine case.)
    fn check_heartbeat(&mut self) -> Result<(), ActorProcessingErr> {
        let Some(gpu) = self.services.gpu() else { return Ok(()) };
        let Some(w) = self.watchdog.as_mut() else { return Ok(()) };
        let snap = gpu.device.snapshot(self.slot)?;
        // An incarnation that ended (its event lost or late) for a whole timeout is treated as failed.
        let ended =
            snap.generation == self.generation && matches!(snap.state, SlotState::Failed | SlotState::Terminated);
        match (ended, w.ended_since) {
            (false, _) => w.ended_since = None,
            (true, None) => w.ended_since = Some(Instant::now()),
            (true, Some(t)) if t.elapsed() >= w.timeout => {
                metrics::counter!("ringvisor_watchdog_trips_total").increment(1);
                return Err(format!(
                    "GPU actor `{}` (slot {}) ended ({:?}) and no event told the host",
                    self.shared.id, self.slot, snap.state
                )
                .into());
            }
            (true, Some(_)) => {}
        }
        let pending = snap.inbox.1.wrapping_sub(snap.inbox.0);
        if snap.generation != self.generation || pending == 0 || snap.heartbeat != w.heartbeat {
            w.heartbeat = snap.heartbeat;
            w.since = Instant::now();
            return Ok(());
        }
        let stale = w.since.elapsed();
        if stale < w.timeout {
            return Ok(());
        }
        metrics::counter!("ringvisor_watchdog_trips_total").increment(1);
        tracing::warn!(child = %self.shared.id, slot = self.slot, ?stale, pending, "GPU actor hung");
        Err(format!(
            "GPU actor `{}` (slot {}) hung: heartbeat stale for {stale:?} with {pending} messages pending",
            self.shared.id, self.slot
        )
        .into())
    }
}

/// After a GPU child's slot actor has exited (however it exited): a device actor still running (its slot
/// actor was killed) is killed so it stops consuming messages.
pub(crate) fn stop_orphaned_slot(services: &Services, slot: u32) {
    let Some(gpu) = services.gpu() else { return };
    if let Ok((_, SlotState::Active | SlotState::Draining | SlotState::Initializing)) = gpu.device.host_view(slot) {
        let _ = gpu.device.kill(slot);
    }
}

/// When a GPU child ends for good: a failed slot is killed so the messages still queued in it become dead
/// letters (a restart would have kept the ones sent after the failure).
pub(crate) fn retire_slot(services: &Services, slot: u32) {
    let Some(gpu) = services.gpu() else { return };
    if let Ok((_, SlotState::Failed)) = gpu.device.host_view(slot) {
        let _ = gpu.device.kill(slot);
    }
}
