//! Stable handles: a [`ChildRef`] (and, for GPU children, a [`GpuActorRef`]) stays valid across restarts of
//! the same child. Messages sent while the child restarts wait for the new incarnation; messages sent to a
//! child that is gone for good go to the dead-letter queue with the reason.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ractor::ActorCell;
use ringvisor_device::{Device, DeviceError, Reply};

use crate::dead_letter::{DeadLetterReason, DeadLetters, Origin};
use crate::error::SendError;
use crate::reason::ExitReason;
use crate::slots::{DeviceSlots, Notice};
use crate::status::{ChildStatus, Incarnation, StatusCell};
use crate::sync::{lock, read, write};

/// Where a GPU child lives: its device (as the tree sees it) and its slot there.
struct Home {
    slots: Arc<DeviceSlots>,
    slot: u32,
}

/// The GPU side of a child: its device, its slot and the messages parked while the slot does not accept any.
pub(crate) struct GpuActorShared {
    /// The device and slot, read and changed together (a message must never reach the slot of the same
    /// number on another device). They change only between incarnations: the slot when it is quarantined
    /// and the child moves, the device when it is lost and the child moves to another.
    home: RwLock<Home>,
    /// The running incarnation's generation (0 while none runs).
    generation: AtomicU32,
    parked: Mutex<VecDeque<Vec<u8>>>,
    dead_letters: DeadLetters,
}

impl GpuActorShared {
    /// Runs `f` on the child's device and slot, read together.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Device, u32) -> R) -> R {
        let home = read(&self.home);
        f(&home.slots.device, home.slot)
    }

    /// The child's device as the tree sees it, and its slot.
    pub(crate) fn home(&self) -> (Arc<DeviceSlots>, u32) {
        let home = read(&self.home);
        (home.slots.clone(), home.slot)
    }

    pub(crate) fn device(&self) -> Device {
        read(&self.home).slots.device.clone()
    }

    /// The child's device index in the runtime, its device and its slot, read together.
    pub(crate) fn location(&self) -> (usize, Device, u32) {
        let home = read(&self.home);
        (home.slots.index, home.slots.device.clone(), home.slot)
    }

    /// The child's device and slot, read together, for use after the lock (an await, a spawned task).
    pub(crate) fn placed(&self) -> (Device, u32) {
        self.with(|device, slot| (device.clone(), slot))
    }

    pub(crate) fn slot(&self) -> u32 {
        read(&self.home).slot
    }

    /// Whether the child lives in `slot` of the device whose [`DeviceSlots::id`] is `device`.
    pub(crate) fn is_at(&self, device: u64, slot: u32) -> bool {
        let home = read(&self.home);
        home.slots.id == device && home.slot == slot
    }

    /// The child moved off a quarantined slot, on the same device.
    pub(crate) fn move_to(&self, slot: u32) {
        write(&self.home).slot = slot;
    }

    /// The child moved to `slot` of another device (its own was lost).
    pub(crate) fn move_to_device(&self, slots: Arc<DeviceSlots>, slot: u32) {
        *write(&self.home) = Home { slots, slot };
    }

    /// Files a message from the host to this child, filed under `target`, as a dead letter.
    fn dead_letter(&self, reason: DeadLetterReason, target: String, payload: Vec<u8>) {
        self.dead_letters.push(reason, Origin::Host, Some(target), Some(self.slot()), payload);
    }
}

/// A mirrored GPU child's mirrors, as its shared state holds them (`crate::mirror` runs them).
#[derive(Default)]
pub(crate) struct MirrorSlot {
    /// The last mirror spawned: running, or ended and perhaps still on its way out (a new one waits for it
    /// to leave its name).
    pub(crate) last: Option<ActorCell>,
    /// The running incarnation's mirror, while it runs.
    pub(crate) running: Option<ActorCell>,
    /// The runtime to spawn the running incarnation's mirror on when it is first asked for: a mirror found only
    /// through its child's handle, not spawned yet.
    pub(crate) on_demand: Option<tokio::runtime::Handle>,
}

/// The state every handle of one child shares.
pub(crate) struct ChildShared {
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    status: StatusCell,
    pub(crate) actor: Mutex<Option<ActorCell>>,
    /// A mirrored GPU child's mirrors (`crate::mirror`).
    pub(crate) mirror: Mutex<MirrorSlot>,
    pub(crate) gpu_actor: Option<GpuActorShared>,
}

impl ChildShared {
    pub(crate) fn new(
        id: String,
        name: Option<String>,
        gpu: Option<(Arc<DeviceSlots>, u32, DeadLetters)>,
    ) -> Arc<Self> {
        Arc::new(Self {
            id,
            name,
            status: StatusCell::new(ChildStatus::Starting),
            actor: Mutex::new(None),
            mirror: Mutex::new(MirrorSlot::default()),
            gpu_actor: gpu.map(|(slots, slot, dead_letters)| GpuActorShared {
                home: RwLock::new(Home { slots, slot }),
                generation: AtomicU32::new(0),
                parked: Mutex::new(VecDeque::new()),
                dead_letters,
            }),
        })
    }

    pub(crate) fn status(&self) -> ChildStatus {
        self.status.get()
    }

    /// The name messages to this child are filed under in the dead-letter queue.
    pub(crate) fn target(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.id.clone())
    }

    /// Marks the child running as `incarnation`, then hands it the messages parked while it was down.
    pub(crate) fn set_running(&self, incarnation: &Incarnation) {
        *lock(&self.actor) = incarnation.actor().cloned();
        match &self.gpu_actor {
            Some(gpu) => {
                if let Incarnation::Gpu(generation) = incarnation {
                    gpu.generation.store(*generation, Ordering::Release);
                }
                let mut parked = lock(&gpu.parked);
                self.status.set(ChildStatus::Running);
                while let Some(payload) = parked.pop_front() {
                    match gpu.with(|device, slot| device.send_timeout(slot, &payload, Duration::from_secs(1))) {
                        Ok(_) => {}
                        Err(DeviceError::NotAccepting { .. } | DeviceError::Quarantined { .. }) => {
                            // Down again already: keep it (and the rest) for the next incarnation.
                            parked.push_front(payload);
                            break;
                        }
                        Err(e) => {
                            let reason = match e {
                                DeviceError::InboxFull { .. } => DeadLetterReason::InboxFull,
                                DeviceError::DeviceLost => DeadLetterReason::DeviceLost,
                                _ => DeadLetterReason::DeadTarget,
                            };
                            gpu.dead_letter(reason, self.target(), payload);
                        }
                    }
                }
            }
            None => {
                self.status.set(ChildStatus::Running);
            }
        }
    }

    /// Marks the child down: `Restarting` keeps parked messages for the next incarnation; `Stopped` and
    /// `Gone` turn them into dead letters. A mirror still running is stopped (a crash has failed it already).
    pub(crate) fn set_down(&self, status: ChildStatus) {
        debug_assert!(status != ChildStatus::Running);
        self.end_mirror(None);
        *lock(&self.actor) = None;
        match &self.gpu_actor {
            Some(gpu) => {
                gpu.generation.store(0, Ordering::Release);
                let mut parked = lock(&gpu.parked);
                self.status.set(status);
                if status.has_ended() {
                    for payload in parked.drain(..) {
                        gpu.dead_letter(DeadLetterReason::DeadTarget, self.target(), payload);
                    }
                }
            }
            None => {
                self.status.set(status);
            }
        }
    }

    pub(crate) fn actor(&self) -> Option<ActorCell> {
        lock(&self.actor).clone()
    }
}

/// A stable handle on a supervised child, whatever its kind. Cheap to clone.
#[derive(Clone)]
pub struct ChildRef {
    pub(crate) shared: Arc<ChildShared>,
}

impl std::fmt::Debug for ChildRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildRef")
            .field("id", &self.shared.id)
            .field("name", &self.shared.name)
            .field("status", &self.status())
            .finish()
    }
}

impl ChildRef {
    /// A handle on a host actor that no supervisor manages (to put it in a registry).
    pub fn unsupervised(id: impl Into<String>, actor: ActorCell) -> Self {
        let shared = ChildShared::new(id.into(), None, None);
        shared.set_running(&Incarnation::Actor(actor));
        Self { shared }
    }

    /// The child's id among its siblings.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The child's registry name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }

    /// Where the child is in its life.
    pub fn status(&self) -> ChildStatus {
        self.shared.status()
    }

    /// The ractor actor of the current incarnation: a host actor's or supervisor's, a mirrored GPU child's
    /// mirror ([`GpuChild::mirrored`](crate::GpuChild::mirrored)); `None` while it is down, and for a GPU child
    /// that is not mirrored (see [`ChildRef::gpu`]).
    pub fn actor(&self) -> Option<ActorCell> {
        self.shared.actor_or_mirror()
    }

    /// The GPU handle, for GPU children.
    pub fn gpu(&self) -> Option<GpuActorRef> {
        self.shared.gpu_actor.as_ref().map(|_| GpuActorRef { shared: self.shared.clone() })
    }

    /// Waits until the child is running (returns true) or gone / stopped / past `timeout` (false).
    pub async fn wait_running(&self, timeout: Duration) -> bool {
        let settled = tokio::time::timeout(
            timeout,
            self.shared
                .status
                .wait_for(|s| matches!(s, ChildStatus::Running | ChildStatus::Stopped | ChildStatus::Gone)),
        )
        .await;
        matches!(settled, Ok(ChildStatus::Running))
    }

    /// True when both handles designate the same child (the same spec, across restarts).
    pub fn same_child(&self, other: &ChildRef) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

/// A stable handle on a supervised GPU actor: valid across its restarts. Cheap to clone.
#[derive(Clone)]
pub struct GpuActorRef {
    pub(crate) shared: Arc<ChildShared>,
}

impl std::fmt::Debug for GpuActorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuActorRef").field("id", &self.shared.id).field("slot", &self.slot()).finish()
    }
}

impl GpuActorRef {
    /// The running incarnation's ractor actor (a mirrored child's mirror), if any.
    pub(crate) fn actor_cell(&self) -> Option<ActorCell> {
        self.shared.actor_or_mirror()
    }

    fn gpu(&self) -> &GpuActorShared {
        self.shared.gpu_actor.as_ref().expect("a GpuActorRef is only made for GPU children")
    }

    /// The device the child runs on: the one it was started on, unless that device was lost and the child
    /// moved to another when it restarted (a runtime on several devices; with one device, a device restart
    /// starts a new tree).
    pub fn device(&self) -> Device {
        self.gpu().device()
    }

    /// The device slot the child lives in (the same across restarts, unless its slot is quarantined or its
    /// device lost, and the child moves).
    pub fn slot(&self) -> u32 {
        self.gpu().slot()
    }

    /// Where the child lives, read together: its device's index among the runtime's devices, the device and
    /// the slot (see [`GpuActorRef::device`] and [`GpuActorRef::slot`]).
    pub fn location(&self) -> (usize, Device, u32) {
        self.gpu().location()
    }

    /// The child's routed kernel-to-kernel address (the device code's `rv_address(device, slot)`): hand it to
    /// another GPU actor, on any device of the runtime, and that actor's `rv_send` / `rv_forward` to it reach
    /// this child through the host. Valid while the child keeps its device and slot (across restarts, unless
    /// it moves: see [`GpuActorRef::slot`]). `None` for a device index or slot a routed address cannot hold
    /// (127 devices, 2^24 slots).
    pub fn address(&self) -> Option<u32> {
        let (index, _, slot) = self.location();
        ringvisor_device::routed_address(u32::try_from(index).ok()?, slot)
    }

    /// The child's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Where the child is in its life.
    pub fn status(&self) -> ChildStatus {
        self.shared.status()
    }

    /// Makes the running incarnation exit with `reason`, as OTP's `exit(Pid, Reason)` does to a process
    /// that does not trap exits: its supervisor sees that exit and acts on it by the child's restart type (a
    /// transient child that exits `normal` or `shutdown` is not restarted). The device actor is killed: the
    /// messages queued in it are handed back as dead letters. Returns false if no incarnation is running
    /// (the child is between incarnations, or has ended).
    pub fn exit(&self, reason: ExitReason) -> bool {
        let gpu = self.gpu();
        let generation = gpu.generation.load(Ordering::Acquire);
        let (slots, slot) = gpu.home();
        generation != 0 && slots.send_notice(slot, generation, Notice::Exit(reason))
    }

    /// The generic handle.
    pub fn child(&self) -> ChildRef {
        ChildRef { shared: self.shared.clone() }
    }

    fn dead_letter(&self, reason: DeadLetterReason, payload: &[u8]) {
        self.gpu().dead_letter(reason, self.shared.target(), payload.to_vec());
    }

    /// The child has ended for good (`status`): `payloads` are dead letters, and the send fails.
    fn refuse_ended<'a>(&self, status: ChildStatus, payloads: impl IntoIterator<Item = &'a [u8]>) -> SendError {
        for p in payloads {
            self.dead_letter(DeadLetterReason::DeadTarget, p);
        }
        SendError::Gone { actor: self.shared.target(), status }
    }

    /// Sends a one-way message. While the child restarts the message waits for the new incarnation; a
    /// child gone for good, or a full inbox, turns it into a dead letter and an error.
    pub fn send(&self, payload: &[u8]) -> Result<(), SendError> {
        self.send_until(payload, None)
    }

    /// Like [`GpuActorRef::send`], waiting up to `timeout` for room in a full inbox.
    pub fn try_send(&self, payload: &[u8], timeout: Duration) -> Result<(), SendError> {
        self.send_until(payload, Some(timeout))
    }

    fn send_until(&self, payload: &[u8], timeout: Option<Duration>) -> Result<(), SendError> {
        let gpu = self.gpu();
        gpu.with(|device, _| fits_device(device, payload))?;
        // The parked queue's lock orders this send against `set_running`'s flush and `set_down`.
        let mut parked = lock(&gpu.parked);
        let status = self.shared.status();
        if status.has_ended() {
            drop(parked);
            return Err(self.refuse_ended(status, [payload]));
        }
        if !parked.is_empty() {
            return self.park(&mut parked, payload);
        }
        let sent = gpu.with(|device, slot| match timeout {
            None => device.send(slot, payload),
            Some(t) => device.send_timeout(slot, payload, t),
        });
        match sent {
            Ok(_) => Ok(()),
            // Between incarnations, or moving off a quarantined slot: wait for the next incarnation.
            Err(DeviceError::NotAccepting { .. } | DeviceError::Quarantined { .. }) => self.park(&mut parked, payload),
            Err(DeviceError::InboxFull { .. }) => {
                drop(parked);
                self.dead_letter(DeadLetterReason::InboxFull, payload);
                Err(SendError::InboxFull)
            }
            Err(e) => {
                drop(parked);
                Err(self.device_error(e, payload))
            }
        }
    }

    /// Sends one-way messages in one go (one lock, one publication, one wake-up on the device), in order.
    /// Returns how many were accepted: the rest did not fit in the inbox and were not handed over (no dead
    /// letter): send them again. While the child restarts, they wait for the new incarnation (up to an
    /// inbox's worth); to a child gone for good they are dead letters and an error.
    pub fn send_batch<P: AsRef<[u8]>>(&self, payloads: &[P]) -> Result<usize, SendError> {
        let gpu = self.gpu();
        gpu.with(|device, _| payloads.iter().try_for_each(|p| fits_device(device, p.as_ref())))?;
        let mut parked = lock(&gpu.parked);
        let status = self.shared.status();
        if status.has_ended() {
            drop(parked);
            return Err(self.refuse_ended(status, payloads.iter().map(AsRef::as_ref)));
        }
        let park_all = |parked: &mut VecDeque<Vec<u8>>| {
            let room = (gpu.with(|device, _| device.inbox_capacity()) as usize).saturating_sub(parked.len());
            let n = room.min(payloads.len());
            parked.extend(payloads[..n].iter().map(|p| p.as_ref().to_vec()));
            Ok(n)
        };
        if !parked.is_empty() {
            return park_all(&mut parked);
        }
        match gpu.with(|device, slot| device.send_batch(slot, payloads)) {
            Ok(n) => Ok(n),
            Err(DeviceError::InboxFull { .. }) => Ok(0),
            Err(DeviceError::NotAccepting { .. } | DeviceError::Quarantined { .. }) => park_all(&mut parked),
            Err(e) => Err(SendError::Device(e)),
        }
    }

    /// A device error that ends a send or call: a message the device lost or never took (a call unanswered
    /// when it was declared lost or shut down, or sent to such a device) is a dead letter; other errors carry
    /// their own accounting (an undelivered message is in the queue already).
    fn device_error(&self, e: DeviceError, payload: &[u8]) -> SendError {
        match e {
            DeviceError::DeviceLost => self.dead_letter(DeadLetterReason::DeviceLost, payload),
            DeviceError::Closed => self.dead_letter(DeadLetterReason::DeadTarget, payload),
            // An undelivered one was filed as a dead letter by whoever handed it back (the device's accounting).
            _ => {}
        }
        self.named(e)
    }

    /// A device error as the handle's: an undelivered message names the actor, in the dead letters' words
    /// (the device filed the letter when it handed the message back); any other error as it is.
    fn named(&self, e: DeviceError) -> SendError {
        match e {
            DeviceError::Undelivered { slot, generation, reason } => {
                SendError::Undelivered { actor: self.shared.target(), slot, generation, reason: reason.into() }
            }
            e => SendError::Device(e),
        }
    }

    /// The device the child runs on (with its slot pool), and its slot there.
    pub(crate) fn home(&self) -> (Arc<DeviceSlots>, u32) {
        self.gpu().home()
    }

    fn park(&self, parked: &mut VecDeque<Vec<u8>>, payload: &[u8]) -> Result<(), SendError> {
        let gpu = self.gpu();
        if parked.len() >= gpu.with(|device, _| device.inbox_capacity()) as usize {
            self.dead_letter(DeadLetterReason::InboxFull, payload);
            return Err(SendError::InboxFull);
        }
        parked.push_back(payload.to_vec());
        Ok(())
    }

    /// [`GpuActorRef::send`] of a `#[repr(C)]` message type: its bytes are the payload (the behaviour
    /// reads the same struct).
    pub fn send_typed<Req: bytemuck::Pod>(&self, request: &Req) -> Result<(), SendError> {
        self.send(bytemuck::bytes_of(request))
    }

    /// [`GpuActorRef::send`] of a host-side type archived with rkyv (for a behaviour that reads the archive, or
    /// an actor that forwards it); up to the device's largest message.
    pub fn send_archived<Req: ringvisor_device::Archivable>(&self, request: &Req) -> Result<(), SendError> {
        self.send(&ringvisor_device::archive(request)?)
    }

    /// [`GpuActorRef::call`] with rkyv types: the request archived, the reply validated before it is decoded
    /// (bytes that are not a valid `Resp` archive are [`SendError::Device`] with the codec's reason, never
    /// garbage). Requests and replies up to the device's largest message (`bulk_bytes`).
    pub async fn call_archived<Req, Resp>(&self, request: &Req, timeout: Duration) -> Result<Resp, SendError>
    where
        Req: ringvisor_device::Archivable,
        Resp: ringvisor_device::Unarchivable,
    {
        let reply = self.call(&ringvisor_device::archive(request)?, timeout).await?;
        Ok(ringvisor_device::decode_archived(reply.payload()?)?)
    }

    /// A copy of the actor's state (OTP's `sys:get_state`), taken between two messages, after every message sent
    /// to it before: as many bytes as its behaviour declares, else the whole state region (see
    /// [`Device::read_state`]; a read larger than one envelope needs the device's `bulk_bytes`, and the error
    /// says so). The child must be running: while it is down the error says why ([`SendError::Gone`] for good,
    /// the device's `NotAccepting` while it restarts).
    pub async fn state(&self, timeout: Duration) -> Result<Vec<u8>, SendError> {
        self.read_state(None, timeout).await
    }

    /// [`GpuActorRef::state`] read as the behaviour's `#[repr(C)]` state struct: only the region's first
    /// `size_of::<T>()` bytes are read (a `T` larger than the region is [`SendError::Device`] with the sizes).
    pub async fn state_typed<T: bytemuck::Pod>(&self, timeout: Duration) -> Result<T, SendError> {
        let size = std::mem::size_of::<T>();
        let bytes = self.read_state(Some(size), timeout).await.map_err(|e| match e {
            SendError::Device(DeviceError::PayloadTooLarge { max, .. }) => SendError::Device(DeviceError::Codec(
                format!("a state of {max} bytes cannot hold a {} ({size} bytes)", std::any::type_name::<T>()),
            )),
            e => e,
        })?;
        let head = bytes.get(..size).ok_or_else(|| {
            DeviceError::Codec(format!("a state read of {} bytes cannot hold a {size}-byte value", bytes.len()))
        })?;
        Ok(bytemuck::pod_read_unaligned(head))
    }

    /// The state read of [`GpuActorRef::state`]: the first `len` bytes, or the declared size.
    async fn read_state(&self, len: Option<usize>, timeout: Duration) -> Result<Vec<u8>, SendError> {
        let status = self.status();
        if status.has_ended() {
            return Err(SendError::Gone { actor: self.shared.target(), status });
        }
        let (device, slot) = self.gpu().placed();
        let read = match len {
            Some(len) => device.read_state_prefix_async(slot, len, timeout).await,
            None => device.read_state_async(slot, timeout).await,
        };
        read.map_err(|e| match e {
            DeviceError::Timeout => SendError::Timeout,
            e => self.named(e),
        })
    }

    /// [`GpuActorRef::call`] with `#[repr(C)]` request and reply types: the request's bytes are the payload,
    /// and the reply must be exactly a `Resp` (otherwise [`SendError::Device`] with the sizes). A reply the
    /// behaviour gave as an error code comes back as that error, as with `call`.
    pub async fn call_typed<Req: bytemuck::Pod, Resp: bytemuck::Pod>(
        &self,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, SendError> {
        Ok(self.call(bytemuck::bytes_of(request), timeout).await?.decode()?)
    }

    /// Sends a message and waits up to `timeout` for the reply, across a restart if one is under way.
    pub async fn call(&self, payload: &[u8], timeout: Duration) -> Result<Reply, SendError> {
        let gpu = self.gpu();
        gpu.with(|device, _| fits_device(device, payload))?;
        let deadline = ringvisor_device::deadline_after(timeout);
        loop {
            let status = self.shared.status();
            if status.has_ended() {
                return Err(self.refuse_ended(status, [payload]));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SendError::Timeout);
            }
            // Read where the child lives on every attempt: a restart may have moved it.
            let (device, slot) = gpu.placed();
            match device.call_async(slot, payload, left).await {
                Err(DeviceError::NotAccepting { .. } | DeviceError::Quarantined { .. }) => {
                    // Down between incarnations: wait for a status change (or poll, for a drain in progress).
                    let change = self.shared.status.next_change();
                    if self.shared.status() == status {
                        let _ = tokio::time::timeout(left.min(Duration::from_millis(2)), change).await;
                    }
                }
                Err(DeviceError::Timeout) => return Err(SendError::Timeout),
                Err(DeviceError::InboxFull { .. }) => {
                    self.dead_letter(DeadLetterReason::InboxFull, payload);
                    return Err(SendError::InboxFull);
                }
                Err(e) => return Err(self.device_error(e, payload)),
                Ok(reply) => return Ok(reply),
            }
        }
    }
}

/// The device's payload check ([`Device::check_payload`]: one envelope, or its bulk areas' size), as a send's
/// error (checked before a message is parked, too).
fn fits_device(device: &Device, payload: &[u8]) -> Result<(), SendError> {
    device
        .check_payload(payload)
        .map_err(|_| SendError::PayloadTooLarge { len: payload.len(), max: device.max_payload() })
}
