//! What a supervision tree shares: the registry, the dead-letter queue, the tree-event hub, and (when a
//! device is attached) the device, its slot pool and the router of its events.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
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

/// Which slots of the device are free for GPU children.
pub(crate) struct SlotPool {
    free: Mutex<BTreeSet<u32>>,
}

impl SlotPool {
    fn new(slots: u32) -> Self {
        Self { free: Mutex::new((0..slots).collect()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `wanted` (if free) or the lowest free slot.
    pub(crate) fn acquire(&self, wanted: Option<u32>) -> Option<u32> {
        let mut free = self.lock();
        let slot = match wanted {
            Some(s) => free.contains(&s).then_some(s)?,
            None => *free.iter().next()?,
        };
        free.remove(&slot);
        Some(slot)
    }

    pub(crate) fn release(&self, slot: u32) {
        self.lock().insert(slot);
    }

    pub(crate) fn free_count(&self) -> usize {
        self.lock().len()
    }
}

/// Who listens to a slot's device events: its slot actor, and the name its dead letters are filed under.
struct SlotBinding {
    actor: Option<ActorRef<SlotMsg>>,
    target: String,
}

pub(crate) struct GpuServices {
    pub(crate) device: Device,
    pub(crate) slots: SlotPool,
    bindings: DashMap<u32, SlotBinding>,
    /// Injected faults on the path from the device to slot actors (tests only).
    event_faults: DashMap<u32, (EventFault, Instant)>,
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

impl GpuServices {
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
    gpu: Option<GpuServices>,
    /// The device event hook (kept alive here; the device holds it weakly).
    hook: Option<Arc<EventHook>>,
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
        let gpu = GpuServices {
            slots: SlotPool::new(device.slot_count()),
            bindings: DashMap::new(),
            event_faults: DashMap::new(),
            device: device.clone(),
        };
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            let hook: Arc<EventHook> = Arc::new(move |event: &SlotEvent| {
                if let Some(inner) = weak.upgrade() {
                    if let Some(gpu) = &inner.gpu {
                        gpu.route(event, &inner.dead_letters);
                    }
                }
            });
            Inner {
                registry: Registry::new(),
                dead_letters,
                events: TreeEvents::default(),
                gpu: Some(gpu),
                hook: Some(hook),
            }
        });
        if let Some(hook) = &inner.hook {
            device.on_event(hook);
        }
        Self { inner }
    }

    fn build(gpu: Option<GpuServices>, dead_letters: DeadLetters) -> Self {
        Self {
            inner: Arc::new(Inner {
                registry: Registry::new(),
                dead_letters,
                events: TreeEvents::default(),
                gpu,
                hook: None,
            }),
        }
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

    /// The device, if one is attached.
    pub fn device(&self) -> Option<&Device> {
        self.inner.gpu.as_ref().map(|g| &g.device)
    }

    /// Device slots not yet given to a GPU child (0 without a device).
    pub fn free_slots(&self) -> usize {
        self.inner.gpu.as_ref().map_or(0, |g| g.slots.free_count())
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
        match (self.registry().lookup(name).and_then(|c| c.gpu()), self.gpu()) {
            (Some(actor), Some(gpu)) => {
                gpu.inject_event_fault(actor.slot(), fault, duration);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn gpu(&self) -> Option<&GpuServices> {
        self.inner.gpu.as_ref()
    }
}
