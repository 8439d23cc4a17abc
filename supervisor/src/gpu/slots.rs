//! One device and what the tree keeps about it: its slot pool, who listens to each slot (the slot actor, and
//! the name its dead letters are filed under), and the routing of the device's events: the messages an event
//! made undeliverable to the dead-letter queue, the event itself to the slot's actor. Routing is a hook on the
//! device's event path (`Device::on_event`): no thread of its own, no hand-off.

use std::sync::Arc;

use dashmap::DashMap;
use ractor::ActorRef;
use ringvisor_device::{Device, EventHook, SlotEvent, UndeliveredReason};

use super::event_faults::{EventFault, EventFaults};
use super::pool::SlotPool;
use super::watchdog::Watchdogs;
use super::SlotMsg;
use crate::dead_letter::{DeadLetterReason, DeadLetters, DeviceOrigin, Origin};

/// Who listens to a slot's device events: its slot actor, and the name its dead letters are filed under.
pub(super) struct SlotBinding {
    pub(super) actor: Option<ActorRef<SlotMsg>>,
    pub(super) target: String,
}

/// One device and what the tree keeps about it: its slot pool, who listens to each slot, injected event
/// faults. A device restart brings a new one; a child keeps the one it was started on, so what an old
/// child releases late never reaches the new device's pool.
pub(crate) struct DeviceSlots {
    pub(crate) device: Device,
    pub(crate) pool: SlotPool,
    pub(super) bindings: DashMap<u32, SlotBinding>,
    /// Injected faults on the path from the device to slot actors (tests only).
    pub(crate) event_faults: EventFaults,
    /// The hung-actor detector of every GPU child on this device.
    pub(super) watchdogs: Arc<Watchdogs>,
    /// The device event hook (kept alive here; the device holds it weakly).
    _hook: Arc<EventHook>,
}

impl DeviceSlots {
    /// Attaches the tree to `device`: its events are routed (dead letters to the queue, events to slot
    /// actors) by a hook on the device's event path, with no thread of its own.
    pub(crate) fn attach_device(device: Device, dead_letters: DeadLetters) -> Arc<Self> {
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
                event_faults: EventFaults::default(),
                watchdogs: Arc::default(),
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

    /// Routes one device event: its undeliverable messages to the dead-letter queue, the event to the
    /// slot's actor.
    fn route(&self, event: &SlotEvent, dead_letters: &DeadLetters) {
        let slot = event.event.slot;
        let (actor, target) = match self.bindings.get(&slot) {
            Some(b) => (b.actor.clone(), Some(b.target.clone())),
            None => (None, None),
        };
        for u in &event.undelivered {
            // The code of the failure this message caused; a (re)creation's event carries no code.
            let code = (u.reason == UndeliveredReason::InFlightAtCrash).then_some(event.event.code).flatten();
            dead_letters.push_handed_back(
                DeadLetterReason::from(u.reason),
                Origin::of(&u.envelope),
                target.clone(),
                DeviceOrigin { slot: u.slot, generation: u.generation, code },
                u.envelope.payload().to_vec(),
            );
        }
        let Some(actor) = actor else { return };
        match self.event_faults.in_force(slot) {
            Some(EventFault::Drop) => {
                tracing::debug!(slot, kind = ?event.event.kind, "device event dropped (fault)")
            }
            Some(EventFault::Delay(d)) => {
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
}
