//! What a supervision tree shares: the registry, the dead-letter queue, the tree-event hub, and (when a
//! device is attached) the device as the tree sees it (`gpu::slots::DeviceSlots`: slot pool, event routing).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ringvisor_device::Device;

use crate::dead_letter::{DeadLetterReason, DeadLetters, Origin};
use crate::error::SendError;
use crate::gpu::slots::DeviceSlots;
use crate::gpu::EventFault;
use crate::handle::GpuActorRef;
use crate::registry::Registry;
use crate::sync::{read, write};
use crate::tree_events::TreeEvents;

struct Inner {
    registry: Registry,
    dead_letters: DeadLetters,
    events: TreeEvents,
    /// The device the tree runs on now (replaced by a device restart).
    device_slots: Option<RwLock<Arc<DeviceSlots>>>,
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
    /// the queue, the ends of incarnations to supervisors) by a hook on the device's event path, with no thread of its own.
    pub fn with_device(device: Device) -> Self {
        Self::with_device_and_dead_letters(device, DeadLetters::default())
    }

    /// Like [`Services::with_device`], with a dead-letter queue configured by the caller.
    pub fn with_device_and_dead_letters(device: Device, dead_letters: DeadLetters) -> Self {
        let slots = DeviceSlots::attach_device(device, dead_letters.clone());
        Self::build(Some(RwLock::new(slots)), dead_letters)
    }

    fn build(device_slots: Option<RwLock<Arc<DeviceSlots>>>, dead_letters: DeadLetters) -> Self {
        let events = TreeEvents::default();
        Self { inner: Arc::new(Inner { registry: Registry::new(), dead_letters, events, device_slots }) }
    }

    /// Moves the tree to a new device (after the old one was lost or restarted): GPU children started from
    /// now on get slots of `device`, with a fresh slot pool (no quarantined slot). Children of the old
    /// device keep it until they stop; stop the tree on the old device first (the runtime does: a device
    /// restart is one_for_all at the device level). Returns false for host-only services.
    pub fn replace_device(&self, device: Device) -> bool {
        let Some(gpu) = &self.inner.device_slots else { return false };
        let slots = DeviceSlots::attach_device(device, self.inner.dead_letters.clone());
        *write(gpu) = slots;
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
        self.device_slots().map(|g| g.device.clone())
    }

    /// Device slots not yet given to a GPU child (0 without a device).
    pub fn free_slots(&self) -> usize {
        self.device_slots().map_or(0, |g| g.pool.free_count())
    }

    /// Slots of the current device given up on because their actors never acknowledged a kill; they come
    /// back with the next device restart.
    pub fn quarantined_slots(&self) -> Vec<u32> {
        self.device_slots().map_or_else(Vec::new, |g| g.pool.quarantined())
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
    /// `name` on their way to its supervisor. Returns false if `name` is not a GPU child.
    pub fn inject_event_fault(&self, name: &str, fault: EventFault, duration: Duration) -> bool {
        match self.registry().lookup(name).and_then(|c| c.gpu()) {
            Some(actor) => {
                actor.device_slots().event_faults.inject(actor.slot(), fault, duration);
                true
            }
            None => false,
        }
    }

    /// The device the tree runs on now, with its slot pool.
    pub(crate) fn device_slots(&self) -> Option<Arc<DeviceSlots>> {
        self.inner.device_slots.as_ref().map(|g| read(g).clone())
    }
}
