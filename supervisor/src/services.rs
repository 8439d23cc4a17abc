//! What a supervision tree shares: the registry, the dead-letter queue, the tree-event hub, and the devices
//! it runs on, each as the tree sees it (`gpu::slots::DeviceSlots`: slot pool, event routing), with the
//! placement of GPU children across them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ringvisor_device::{Device, DeviceHealth, Router, Unroutable};

use crate::dead_letter::{DeadLetterReason, DeadLetters, Origin};
use crate::error::SendError;
use crate::handle::GpuActorRef;
use crate::policy::Placement;
use crate::registry::Registry;
use crate::slots::{DeviceSlots, EventFault};
use crate::sync::{read, write};
use crate::tree_events::TreeEvents;

struct Inner {
    registry: Registry,
    dead_letters: DeadLetters,
    events: TreeEvents,
    /// The devices the tree runs on now, by index (each replaced when it is lost or restarted); empty for
    /// host-only services.
    devices: Vec<DeviceHome>,
    /// The next turn of [`Placement::RoundRobin`].
    next_turn: AtomicUsize,
    /// Kernel-to-kernel messages between the tree's devices (each attached at its index); what it cannot
    /// deliver becomes a dead letter.
    router: Router,
}

/// One device index of the tree: the device there now, and a signal for those waiting for its replacement.
struct DeviceHome {
    current: RwLock<Arc<DeviceSlots>>,
    replaced: tokio::sync::Notify,
}

/// The services a supervision tree shares. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    inner: Arc<Inner>,
}

impl Services {
    /// Services for host actors only (GPU children fail to start with a clear error).
    pub fn host_only() -> Self {
        Self::build(Vec::new(), DeadLetters::default())
    }

    /// Services for a tree of GPU (and host) actors on `device`. Device events are routed (dead letters to
    /// the queue, the ends of incarnations to supervisors) by a hook on the device's event path, with no thread of its own.
    pub fn with_device(device: Device) -> Self {
        Self::with_device_and_dead_letters(device, DeadLetters::default())
    }

    /// Like [`Services::with_device`], with a dead-letter queue configured by the caller.
    pub fn with_device_and_dead_letters(device: Device, dead_letters: DeadLetters) -> Self {
        Self::with_devices(vec![device], dead_letters)
    }

    /// Services for a tree on several devices (device `i` is `devices[i]`; none: host actors only). GPU
    /// children are placed by their [`Placement`]. With more than one device, a lost device fails only the
    /// GPU children it held: each exits with reason `device_lost` and its supervisor acts on that exit as
    /// on any other; a restarted child moves to the device that replaces it ([`Services::replace_device_at`])
    /// or, if it fails over, to another device. With one device the runtime restarts the whole tree
    /// instead, as before.
    pub fn with_devices(devices: Vec<Device>, dead_letters: DeadLetters) -> Self {
        let isolated = devices.len() > 1;
        let homes = devices
            .into_iter()
            .enumerate()
            .map(|(index, device)| DeviceHome {
                current: RwLock::new(DeviceSlots::attach_device(device, dead_letters.clone(), index, isolated)),
                replaced: tokio::sync::Notify::new(),
            })
            .collect();
        Self::build(homes, dead_letters)
    }

    fn build(devices: Vec<DeviceHome>, dead_letters: DeadLetters) -> Self {
        let events = TreeEvents::default();
        let services = Self {
            inner: Arc::new(Inner {
                registry: Registry::new(),
                dead_letters,
                events,
                devices,
                next_turn: AtomicUsize::new(0),
                router: Router::new(),
            }),
        };
        let weak = Arc::downgrade(&services.inner);
        services.inner.router.on_unroutable(move |letter| {
            if let Some(inner) = weak.upgrade() {
                (Services { inner }).file_unroutable(letter);
            }
        });
        for index in 0..services.device_count() {
            if let Some(device) = services.device_at(index) {
                services.attach_to_router(index, &device);
            }
        }
        services
    }

    /// Makes `device` device `index` of the tree's router (a tree of more devices than a routed address names
    /// runs, without routed messages to the devices past them).
    fn attach_to_router(&self, index: usize, device: &Device) {
        if let Err(e) = self.inner.router.attach(index as u32, device) {
            tracing::warn!(index, error = %e, "device not reachable by routed kernel-to-kernel messages");
        }
    }

    /// A routed kernel-to-kernel message the router could not deliver, as a dead letter addressed to the child
    /// that holds its target slot (if any).
    fn file_unroutable(&self, letter: Unroutable) {
        let target = self.device_slots_at(letter.to_device as usize).and_then(|slots| slots.target_of(letter.to_slot));
        self.inner.dead_letters.push(
            letter.reason.into(),
            Origin::Routed { device: letter.from_device, slot: letter.from_slot },
            target,
            Some(letter.to_slot),
            letter.envelope.payload().to_vec(),
        );
    }

    /// Moves the tree's first device to `device` (see [`Services::replace_device_at`]).
    pub fn replace_device(&self, device: Device) -> bool {
        self.replace_device_at(0, device)
    }

    /// Puts `device` in place of device `index` (after the old one was lost or restarted): GPU children
    /// placed there from now on get slots of `device`, with a fresh slot pool (no quarantined slot), and
    /// children of a lost device that restart move to it. Children still running on the old device keep it
    /// until they stop. Returns false if there is no device `index`.
    pub fn replace_device_at(&self, index: usize, device: Device) -> bool {
        let Some(home) = self.inner.devices.get(index) else { return false };
        let isolated = self.inner.devices.len() > 1;
        self.attach_to_router(index, &device);
        let slots = DeviceSlots::attach_device(device, self.inner.dead_letters.clone(), index, isolated);
        *write(&home.current) = slots;
        home.replaced.notify_waiters();
        let quarantined: usize = (0..self.device_count()).map(|i| self.quarantined_slots_on(i).len()).sum();
        metrics::gauge!("ringvisor_quarantined_slots").set(quarantined as f64);
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

    /// The tree's first device (device 0), if it has one.
    pub fn device(&self) -> Option<Device> {
        self.device_at(0)
    }

    /// Device `index` as it is now (a lost or restarted device is replaced at the same index).
    pub fn device_at(&self, index: usize) -> Option<Device> {
        self.device_slots_at(index).map(|g| g.device.clone())
    }

    /// Every device of the tree, by index.
    pub fn devices(&self) -> Vec<Device> {
        (0..self.device_count()).filter_map(|i| self.device_at(i)).collect()
    }

    /// How many devices the tree runs on (0 for host-only services).
    pub fn device_count(&self) -> usize {
        self.inner.devices.len()
    }

    /// Device slots not yet given to a GPU child, on all devices (0 without a device).
    pub fn free_slots(&self) -> usize {
        (0..self.device_count()).filter_map(|i| self.device_slots_at(i)).map(|g| g.pool.free_count()).sum()
    }

    /// Slots of the first device given up on because their actors never acknowledged a kill; they come
    /// back with the next device restart (see [`Services::quarantined_slots_on`] for the other devices).
    pub fn quarantined_slots(&self) -> Vec<u32> {
        self.quarantined_slots_on(0)
    }

    /// Quarantined slots of device `index` (empty for a device that does not exist).
    pub fn quarantined_slots_on(&self, index: usize) -> Vec<u32> {
        self.device_slots_at(index).map_or_else(Vec::new, |g| g.pool.quarantined())
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

    /// Calls the GPU actor registered under `name` (see [`GpuActorRef::call`]); an unknown name makes the
    /// message a dead letter, as [`Services::send`] does.
    pub async fn call(
        &self,
        name: &str,
        payload: &[u8],
        timeout: std::time::Duration,
    ) -> Result<ringvisor_device::Reply, SendError> {
        self.gpu_target(name, payload)?.call(payload, timeout).await
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
                let (slots, slot) = actor.home();
                slots.event_faults.inject(slot, fault, duration);
                true
            }
            None => false,
        }
    }

    /// Device `index` as the tree sees it now, with its slot pool.
    pub(crate) fn device_slots_at(&self, index: usize) -> Option<Arc<DeviceSlots>> {
        self.inner.devices.get(index).map(|h| read(&h.current).clone())
    }

    /// The device a new GPU child takes its slot on, by `placement` (see [`Placement`]), among the devices
    /// with a free slot that are not lost, other than device `except`; `Err` says why there is none.
    pub(crate) fn place(&self, placement: Placement, except: Option<usize>) -> Result<Arc<DeviceSlots>, String> {
        let count = self.device_count();
        if count == 0 {
            return Err("needs a runtime with a device".to_string());
        }
        // Free slots of a device a child may go to (`None`: excepted, lost, or full), read once per device.
        let free = |s: &DeviceSlots| {
            let usable = Some(s.index) != except && s.device.health() != DeviceHealth::Lost;
            usable.then(|| s.pool.free_count()).filter(|&n| n > 0)
        };
        let none_free = || {
            let fix = "give the device more slots (`DeviceConfig::slots`; the command's `--slots`) or start fewer GPU \
                       children";
            match except {
                Some(i) => format!("no free slot on any device but device {i} ({}): {fix}", plural_devices(count)),
                None => format!("no free slot on any device ({}): {fix}", plural_devices(count)),
            }
        };
        match placement {
            Placement::Device(index) => self
                .device_slots_at(index as usize)
                .ok_or_else(|| format!("device {index} does not exist ({})", plural_devices(count))),
            Placement::FewestInUse => (0..count)
                .filter_map(|i| self.device_slots_at(i))
                .filter_map(|s| free(&s).map(|n| ((n, std::cmp::Reverse(s.index)), s)))
                .max_by_key(|(key, _)| *key)
                .map(|(_, s)| s)
                .ok_or_else(none_free),
            Placement::RoundRobin => {
                let turn = self.inner.next_turn.fetch_add(1, Ordering::Relaxed);
                (0..count)
                    .filter_map(|k| self.device_slots_at((turn + k) % count))
                    .find(|s| free(s).is_some())
                    .ok_or_else(none_free)
            }
        }
    }

    /// Waits (up to `timeout`) until device `lost`'s index holds another device, and returns that one.
    pub(crate) async fn replacement_of(&self, lost: &DeviceSlots, timeout: Duration) -> Option<Arc<DeviceSlots>> {
        let home = self.inner.devices.get(lost.index)?;
        let wait = async {
            loop {
                let replaced = home.replaced.notified();
                let now = read(&home.current).clone();
                if !now.device.same_device(&lost.device) {
                    return now;
                }
                replaced.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.ok()
    }
}

/// "1 device" / "3 devices: 0 to 2", for errors about device indices.
pub(crate) fn plural_devices(count: usize) -> String {
    match count {
        1 => "the runtime has 1 device: 0".to_string(),
        n => format!("the runtime has {n} devices: 0 to {}", n - 1),
    }
}
