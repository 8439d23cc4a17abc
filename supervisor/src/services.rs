//! What a supervision tree shares: the registry, the dead-letter queue, the tree-event hub, and (when a
//! device is attached) the device, its slot pool and the router of its events.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ractor::ActorRef;
use ringvisor_device::{Device, EventHook, SlotEvent};

use crate::dead_letter::{DeadLetterReason, DeadLetters, Origin};
use crate::error::SendError;
use crate::events::TreeEvents;
use crate::handle::GpuActorRef;
use crate::registry::Registry;
use crate::slot_actor::SlotMsg;

/// Which slots of the device are free for GPU children, and which are quarantined (never handed out again
/// on this device).
pub(crate) struct SlotPool {
    inner: Mutex<PoolSets>,
}

struct PoolSets {
    free: BTreeSet<u32>,
    quarantined: BTreeSet<u32>,
}

impl SlotPool {
    fn new(slots: u32) -> Self {
        Self { inner: Mutex::new(PoolSets { free: (0..slots).collect(), quarantined: BTreeSet::new() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolSets> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `wanted` (if free) or the lowest free slot.
    pub(crate) fn acquire(&self, wanted: Option<u32>) -> Option<u32> {
        let mut sets = self.lock();
        let slot = match wanted {
            Some(s) => sets.free.contains(&s).then_some(s)?,
            None => *sets.free.iter().next()?,
        };
        sets.free.remove(&slot);
        Some(slot)
    }

    /// Gives a slot back (a quarantined slot stays out).
    pub(crate) fn release(&self, slot: u32) {
        let mut sets = self.lock();
        if !sets.quarantined.contains(&slot) {
            sets.free.insert(slot);
        }
    }

    fn quarantine(&self, slot: u32) {
        let mut sets = self.lock();
        sets.free.remove(&slot);
        sets.quarantined.insert(slot);
    }

    pub(crate) fn free_count(&self) -> usize {
        self.lock().free.len()
    }

    fn quarantined(&self) -> Vec<u32> {
        self.lock().quarantined.iter().copied().collect()
    }
}

/// Who listens to a slot's device events: its slot actor, and the name its dead letters are filed under.
struct SlotBinding {
    actor: Option<ActorRef<SlotMsg>>,
    target: String,
}

/// One device and what the tree keeps about it: its slot pool, who listens to each slot, injected event
/// faults. A device restart brings a new one; a child keeps the one it was started on, so what an old
/// child releases late never reaches the new device's pool.
pub(crate) struct DeviceSlots {
    pub(crate) device: Device,
    pub(crate) pool: SlotPool,
    bindings: DashMap<u32, SlotBinding>,
    /// Injected faults on the path from the device to slot actors (tests only).
    event_faults: DashMap<u32, (EventFault, Instant)>,
    /// The device event hook (kept alive here; the device holds it weakly).
    _hook: Arc<EventHook>,
}

/// A fault on the path of a slot's device events to its slot actor (dead-letter accounting is not
/// affected: only what the supervision layer learns, and when).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventFault {
    /// The slot's events are not delivered to its slot actor.
    Drop,
    /// The slot's events reach its slot actor this much later.
    Delay(Duration),
}

impl DeviceSlots {
    /// Attaches the tree to `device`: its events are routed (dead letters to the queue, events to slot
    /// actors) by a hook on the device's event path, with no thread of its own.
    fn attach_device(device: Device, dead_letters: DeadLetters) -> Arc<Self> {
        let slots = Arc::new_cyclic(|weak: &std::sync::Weak<DeviceSlots>| {
            let weak = weak.clone();
            let hook: Arc<EventHook> = Arc::new(move |event: &SlotEvent| {
                if let Some(slots) = weak.upgrade() {
                    slots.route(event, &dead_letters);
                }
            });
            DeviceSlots {
                pool: SlotPool::new(device.slot_count()),
                bindings: DashMap::new(),
                event_faults: DashMap::new(),
                device,
                _hook: hook,
            }
        });
        slots.device.on_event(&slots._hook);
        slots
    }

    /// Files a slot's dead letters under `target` from now on.
    pub(crate) fn claim(&self, slot: u32, target: String) {
        self.bindings.insert(slot, SlotBinding { actor: None, target });
    }

    pub(crate) fn attach(&self, slot: u32, actor: ActorRef<SlotMsg>) {
        if let Some(mut b) = self.bindings.get_mut(&slot) {
            b.actor = Some(actor);
        }
    }

    pub(crate) fn detach(&self, slot: u32, actor: &ActorRef<SlotMsg>) {
        if let Some(mut b) = self.bindings.get_mut(&slot) {
            if b.actor.as_ref().is_some_and(|a| a.get_id() == actor.get_id()) {
                b.actor = None;
            }
        }
    }

    pub(crate) fn unclaim(&self, slot: u32) {
        self.bindings.remove(&slot);
    }

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
        let target = self.bindings.remove(&from).map(|(_, b)| b.target).unwrap_or_default();
        self.claim(to, target);
        Some(to)
    }

    /// Routes one device event: its undeliverable messages to the dead-letter queue, the event to the
    /// slot's actor.
    fn route(&self, event: &SlotEvent, dead_letters: &DeadLetters) {
        let slot = event.event.slot;
        let (actor, target) = match self.bindings.get(&slot) {
            Some(b) => (b.actor.clone(), Some(b.target.clone())),
            None => (None, None),
        };
        for u in &event.undelivered {
            dead_letters.push(
                DeadLetterReason::from(u.reason),
                Origin::of(&u.envelope),
                target.clone(),
                Some(u.slot),
                u.envelope.payload().to_vec(),
            );
        }
        let Some(actor) = actor else { return };
        let fault = self.event_faults.get(&slot).map(|f| *f.value());
        match fault {
            Some((_, until)) if Instant::now() >= until => {
                self.event_faults.remove(&slot);
                let _ = actor.send_message(SlotMsg::Device(event.event.clone()));
            }
            Some((EventFault::Drop, _)) => {
                tracing::debug!(slot, kind = ?event.event.kind, "device event dropped (fault)")
            }
            Some((EventFault::Delay(d), _)) => {
                let ev = event.event.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(d);
                    let _ = actor.send_message(SlotMsg::Device(ev));
                });
            }
            None => {
                let _ = actor.send_message(SlotMsg::Device(event.event.clone()));
            }
        }
    }

    /// Applies `fault` to `slot`'s events for `duration`.
    pub(crate) fn inject_event_fault(&self, slot: u32, fault: EventFault, duration: Duration) {
        self.event_faults.insert(slot, (fault, Instant::now() + duration));
    }
}

struct Inner {
    registry: Registry,
    dead_letters: DeadLetters,
    events: TreeEvents,
    /// The device the tree runs on now (replaced by a device restart).
    gpu: Option<RwLock<Arc<DeviceSlots>>>,
}

/// The services a supervision tree shares. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    inner: Arc<Inner>,
}

impl Services {
    /// Services for host actors only (GPU children fail to start with a clear error).
    pub fn host_only() -> Self {
        Self::build(None, DeadLetters::default())
    }

    /// Services for a tree of GPU (and host) actors on `device`. Device events are routed (dead letters to
    /// the queue, events to slot actors) by a hook on the device's event path, with no thread of its own.
    pub fn with_device(device: Device) -> Self {
        Self::with_device_and_dead_letters(device, DeadLetters::default())
    }

    /// Like [`Services::with_device`], with a dead-letter queue configured by the caller.
    pub fn with_device_and_dead_letters(device: Device, dead_letters: DeadLetters) -> Self {
        let slots = DeviceSlots::attach_device(device, dead_letters.clone());
        Self::build(Some(RwLock::new(slots)), dead_letters)
    }

    fn build(gpu: Option<RwLock<Arc<DeviceSlots>>>, dead_letters: DeadLetters) -> Self {
        Self { inner: Arc::new(Inner { registry: Registry::new(), dead_letters, events: TreeEvents::default(), gpu }) }
    }

    /// Moves the tree to a new device (after the old one was lost or restarted): GPU children started from
    /// now on get slots of `device`, with a fresh slot pool (no quarantined slot). Children of the old
    /// device keep it until they stop; stop the tree on the old device first (the runtime does: a device
    /// restart is one_for_all at the device level). Returns false for host-only services.
    pub fn replace_device(&self, device: Device) -> bool {
        let Some(gpu) = &self.inner.gpu else { return false };
        let slots = DeviceSlots::attach_device(device, self.inner.dead_letters.clone());
        *gpu.write().unwrap_or_else(|p| p.into_inner()) = slots;
        metrics::gauge!("ringvisor_quarantined_slots").set(0.0);
        true
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The dead-letter queue.
    pub fn dead_letters(&self) -> &DeadLetters {
        &self.inner.dead_letters
    }

    /// The tree-event hub.
    pub fn events(&self) -> &TreeEvents {
        &self.inner.events
    }

    /// The device the tree runs on now, if one is attached.
    pub fn device(&self) -> Option<Device> {
        self.gpu().map(|g| g.device.clone())
    }

    /// Device slots not yet given to a GPU child (0 without a device).
    pub fn free_slots(&self) -> usize {
        self.gpu().map_or(0, |g| g.pool.free_count())
    }

    /// Slots of the current device given up on because their actors never acknowledged a kill; they come
    /// back with the next device restart.
    pub fn quarantined_slots(&self) -> Vec<u32> {
        self.gpu().map_or_else(Vec::new, |g| g.pool.quarantined())
    }

    /// The GPU actor registered under `name`; an unknown name (or one bound to a host actor) makes the
    /// message a dead letter.
    fn gpu_target(&self, name: &str, payload: &[u8]) -> Result<GpuActorRef, SendError> {
        match self.registry().lookup(name).and_then(|c| c.gpu()) {
            Some(gpu) => Ok(gpu),
            None => {
                self.dead_letters().push(
                    DeadLetterReason::UnknownTarget,
                    Origin::Host,
                    Some(name.to_string()),
                    None,
                    payload.to_vec(),
                );
                Err(SendError::UnknownTarget(name.to_string()))
            }
        }
    }

    /// Sends a one-way message to the GPU actor registered under `name` (see [`GpuActorRef::send`]).
    pub fn send(&self, name: &str, payload: &[u8]) -> Result<(), SendError> {
        self.gpu_target(name, payload)?.send(payload)
    }

    /// Takes dead letter `seq` out of the queue and sends it again, to `target` (a registry name) or, if
    /// `None`, to the name it was first sent to. If it cannot be delivered it is a dead letter again (with
    /// the new reason). Returns [`SendError::UnknownTarget`] without removing it if `seq` is not held or
    /// has no target.
    pub fn redeliver(&self, seq: u64, target: Option<&str>) -> Result<(), SendError> {
        let dead_letters = self.dead_letters();
        let letter = dead_letters.take(seq).ok_or_else(|| SendError::UnknownTarget(format!("dead letter {seq}")))?;
        let Some(name) = target.map(str::to_string).or_else(|| letter.target.clone()) else {
            dead_letters.restore(letter);
            return Err(SendError::UnknownTarget(format!("dead letter {seq} has no target")));
        };
        let sent = self.send(&name, &letter.payload);
        if sent.is_ok() {
            dead_letters.count_redelivered();
        }
        sent
    }

    /// Fault injection: for `duration`, drop or delay the device events of the GPU child registered as
    /// `name` on their way to its slot actor. Returns false if `name` is not a GPU child.
    pub fn inject_event_fault(&self, name: &str, fault: EventFault, duration: Duration) -> bool {
        match self.registry().lookup(name).and_then(|c| c.gpu()) {
            Some(actor) => {
                actor.device_slots().inject_event_fault(actor.slot(), fault, duration);
                true
            }
            None => false,
        }
    }

    /// The device the tree runs on now, with its slot pool.
    pub(crate) fn gpu(&self) -> Option<Arc<DeviceSlots>> {
        self.inner.gpu.as_ref().map(|g| g.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}
