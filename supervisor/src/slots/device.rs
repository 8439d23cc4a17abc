//! One device and what the tree keeps about it: its slot pool, who listens to each slot (the supervisor of the
//! child running there, and the name its dead letters are filed under), and the fan-out of the device's//! events: the messages an event made undeliverable to the dead-letter queue, the end of an incarnation to
//! its supervisor as a notice. Routing is a hook on the device's event path (`Device::on_event`): no thread of
//! its own, no hand-off.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ringvisor_device::{Device, EventHook, EventKind, SlotEvent, UndeliveredReason};

use super::event_faults::{EventFault, EventFaults};
use super::pool::SlotPool;
use super::watchdog::Watchdogs;
use super::{Notice, NoticeSink, SlotNotice};
use crate::dead_letter::{DeadLetterReason, DeadLetters, DeviceOrigin, Origin};
use crate::sync::lock;

/// Who listens to a slot's device events: the supervisor of the child running there (while it runs), and the
/// name its dead letters are filed under.
pub(super) struct SlotBinding {
    pub(super) sink: Option<NoticeSink>,
    pub(super) target: String,
}

/// One device and what the tree keeps about it: its slot pool, who listens to each slot, injected event
/// faults. A device restart brings a new one; a child keeps the one it was started on (until that device is
/// lost and the child moves), so what an old child releases late never reaches the new device's pool.
pub(crate) struct DeviceSlots {
    pub(crate) device: Device,
    /// Unique among every device this process attaches (a replaced device's stale notices never match the
    /// children of the device that replaced it).
    pub(crate) id: u64,
    /// The device's index among the tree's devices.
    pub(crate) index: usize,
    /// Whether losing this device ends the incarnations it held (the tree has other devices), rather than
    /// leaving the whole tree to be restarted by the runtime.
    isolated: bool,
    pub(crate) pool: SlotPool,
    /// Who listens to each slot, indexed by slot (a table the size of the device: a tree of 100,000
    /// children claims its slots without growing a map, and an event finds its slot's binding by index).
    pub(super) bindings: Box<[Mutex<Option<SlotBinding>>]>,
    /// Injected faults on the path from the device to supervisors (tests only).
    pub(crate) event_faults: EventFaults,
    /// The hung-actor detector of every GPU child on this device.
    pub(crate) watchdogs: Arc<Watchdogs>,
    /// The device event hook (kept alive here; the device holds it weakly).
    _hook: Arc<EventHook>,
}

impl DeviceSlots {
    /// Attaches the tree to `device`: its events are routed (dead letters to the queue, ends of incarnations
    /// to supervisors) by a hook on the device's event path, with no thread of its own.
    /// `index` is its place among the tree's devices; `isolated`: see the field.
    pub(crate) fn attach_device(device: Device, dead_letters: DeadLetters, index: usize, isolated: bool) -> Arc<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let slots = Arc::new_cyclic(|weak: &std::sync::Weak<DeviceSlots>| {
            let weak = weak.clone();
            let hook: Arc<EventHook> = Arc::new(move |event: &SlotEvent| {
                if let Some(slots) = weak.upgrade() {
                    slots.fan_out(event, &dead_letters);
                }
            });
            DeviceSlots {
                pool: SlotPool::new(device.slot_count()),
                bindings: (0..device.slot_count()).map(|_| Mutex::new(None)).collect(),
                event_faults: EventFaults::default(),
                watchdogs: Arc::new(Watchdogs::new(id)),
                device,
                id,
                index,
                isolated,
                _hook: hook,
            }
        });
        slots.device.on_event(&slots._hook);
        slots
    }

    /// The binding of `slot` (`None` for a slot this device does not have).
    fn binding(&self, slot: u32) -> Option<std::sync::MutexGuard<'_, Option<SlotBinding>>> {
        self.bindings.get(slot as usize).map(lock)
    }

    /// The name a slot's dead letters are filed under now, if a child holds it.
    pub(crate) fn target_of(&self, slot: u32) -> Option<String> {
        self.binding(slot)?.as_ref().map(|b| b.target.clone())
    }

    /// Files a slot's dead letters under `target` from now on.
    pub(crate) fn claim(&self, slot: u32, target: String) {
        if let Some(mut b) = self.binding(slot) {
            *b = Some(SlotBinding { sink: None, target });
        }
    }

    /// Sends the ends of the incarnations of `slot` to `sink` (its child's supervisor) from now on.
    pub(crate) fn attach(&self, slot: u32, sink: &NoticeSink) {
        if let Some(b) = self.binding(slot).as_mut().and_then(|b| b.as_mut()) {
            b.sink = Some(sink.clone());
        }
    }

    /// Nobody listens to `slot` any more (its child is being stopped, or is not running).
    pub(crate) fn detach(&self, slot: u32) {
        if let Some(b) = self.binding(slot).as_mut().and_then(|b| b.as_mut()) {
            b.sink = None;
        }
    }

    /// Tells whoever listens to `slot` about its incarnation `generation`; false if nobody listens.
    pub(crate) fn send_notice(&self, slot: u32, generation: u32, what: Notice) -> bool {
        let sink = self.binding(slot).and_then(|b| b.as_ref().and_then(|b| b.sink.clone()));
        let Some(sink) = sink else { return false };
        sink(SlotNotice { device: self.id, slot, generation, what });
        true
    }

    /// The slot is no longer the tree's; returns the name its dead letters were filed under.
    pub(crate) fn unclaim(&self, slot: u32) -> Option<String> {
        self.binding(slot).and_then(|mut b| b.take()).map(|b| b.target)
    }

    /// Fans one device event out: its undeliverable messages to the dead-letter queue, the end of an
    /// incarnation (failed, killed, drained) to the supervisor listening to the slot.
    fn fan_out(&self, event: &SlotEvent, dead_letters: &DeadLetters) {
        let what = match event.event.kind {
            EventKind::Failed => Some(Notice::Failed(event.event.code)),
            EventKind::Killed => Some(Notice::Killed),
            EventKind::Drained => Some(Notice::Drained),
            // One device of several: its children exit (`device_lost`) and their supervisors act on it.
            EventKind::DeviceLost if self.isolated => Some(Notice::DeviceLost),
            // The only device is restarted as a whole (the runtime's one_for_all over device and tree); the
            // child does not fail on its own, which would only make every supervisor exceed its intensity.
            _ => None,
        };
        // Most events (a creation, an acknowledged command) end nothing and hand nothing back: they cost no
        // look-up (a tree of 100,000 children starts with 100,000 of them).
        if what.is_none() && event.undelivered.is_empty() {
            return;
        }
        let slot = event.event.slot;
        let (sink, target) = match self.binding(slot).as_ref().and_then(|b| b.as_ref()) {
            Some(b) => (b.sink.clone(), (!event.undelivered.is_empty()).then(|| b.target.clone())),
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
        let (Some(sink), Some(what)) = (sink, what) else { return };
        let notice = SlotNotice { device: self.id, slot, generation: event.event.generation, what };
        match self.event_faults.in_force(slot) {
            Some(EventFault::Drop) => {
                tracing::debug!(slot, kind = ?event.event.kind, "device event dropped (fault)")
            }
            Some(EventFault::Delay(d)) => {
                std::thread::spawn(move || {
                    std::thread::sleep(d);
                    sink(notice);
                });
            }
            None => sink(notice),
        }
    }
}
