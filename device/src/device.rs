//! The safe device API: open a device, command its slots, send messages, receive replies and events.
//!
//! ```no_run
//! use ringvisor_device::{Device, DeviceConfig};
//! use std::time::Duration;
//!
//! let device = Device::open(DeviceConfig::default().slots(16))?;
//! device.create(0, "counter", &0i64.to_le_bytes())?.wait_blocking(Duration::from_secs(1))?;
//! let reply = device.call(0, &5i64.to_le_bytes(), Duration::from_secs(1))?;
//! let total = i64::from_le_bytes(reply.payload()?[..8].try_into().unwrap());
//! assert_eq!(total, 5);
//! # Ok::<(), ringvisor_device::DeviceError>(())
//! ```
//!
//! Every method is callable from sync code; the waits also have async forms ([`PendingCommand::wait`],
//! [`Device::call_async`], [`Stream::recv`]). A host thread (the *poller*) reads the event ring and the outboxes
//! and routes what it finds: command outcomes to their [`PendingCommand`], replies to [`Device::call`] waiters
//! or to [`Device::replies`], and every event to the subscribers of [`Device::subscribe`].
//!
//! ## No message is lost silently
//! Every message written to an inbox is, exactly once: processed (and answered, unless sent with
//! [`Device::send`]), or handed back as [`Undelivered`] in the [`SlotEvent`] of the kill, restart or failure
//! that made it undeliverable. Messages that cannot be written (full inbox past the deadline, slot not
//! accepting, payload too large) are refused with an error before anything is written.

use crate::backend::{self, cpu::CpuExecutor, Backend, Executor};
use crate::behaviour::{AsBehaviour, BehaviourId, BehaviourSet};
use crate::error::{DeviceCode, DeviceError};
use crate::event::*;
use crate::layout::*;
use crate::message::{check_payload, Envelope, Reply};
use crate::shared::SharedGrid;
use crate::sync::{Completion, Stream, StreamInner};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Sizes and backend of a device.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Actor slots.
    pub slots: u32,
    /// Envelopes per host-to-actor inbox (power of two).
    pub inbox_capacity: u32,
    /// Envelopes per actor-to-host outbox (power of two).
    pub outbox_capacity: u32,
    /// Envelopes per kernel-to-kernel inbox (power of two).
    pub k2k_capacity: u32,
    /// Records in the command ring (power of two).
    pub command_capacity: u32,
    /// Records in the event ring (power of two).
    pub event_capacity: u32,
    /// Bytes of state per actor (multiple of 64).
    pub state_bytes: u32,
    /// The behaviours the device knows.
    pub behaviours: BehaviourSet,
    /// The executor.
    pub backend: Backend,
    /// How long a command waits for room in the command ring.
    pub command_timeout: Duration,
    /// Block 0's heartbeat stale this long = the device is lost (see [`Device::health`]); `None`: never
    /// declared lost.
    pub lost_after: Option<Duration>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            slots: 64,
            inbox_capacity: 64,
            outbox_capacity: 64,
            k2k_capacity: 16,
            command_capacity: 1024,
            event_capacity: 4096,
            state_bytes: 1024,
            behaviours: BehaviourSet::builtins(),
            backend: Backend::default(),
            command_timeout: Duration::from_secs(5),
            lost_after: Some(DEFAULT_LOST_AFTER),
        }
    }
}

impl DeviceConfig {
    /// Sets the number of slots.
    pub fn slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }
    /// Sets the inbox capacity.
    pub fn inbox_capacity(mut self, n: u32) -> Self {
        self.inbox_capacity = n;
        self
    }
    /// Sets the outbox capacity.
    pub fn outbox_capacity(mut self, n: u32) -> Self {
        self.outbox_capacity = n;
        self
    }
    /// Sets the kernel-to-kernel inbox capacity.
    pub fn k2k_capacity(mut self, n: u32) -> Self {
        self.k2k_capacity = n;
        self
    }
    /// Sets the state bytes per actor.
    pub fn state_bytes(mut self, n: u32) -> Self {
        self.state_bytes = n;
        self
    }
    /// Sets the behaviours.
    pub fn behaviours(mut self, set: BehaviourSet) -> Self {
        self.behaviours = set;
        self
    }
    /// Sets the backend.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }
    /// Sets how long block 0's heartbeat may stay stale before the device is declared lost.
    pub fn lost_after(mut self, after: Option<Duration>) -> Self {
        self.lost_after = after;
        self
    }

    fn params(&self) -> RawGridParams {
        RawGridParams {
            slot_count: self.slots,
            inbox_capacity: self.inbox_capacity,
            outbox_capacity: self.outbox_capacity,
            k2k_capacity: self.k2k_capacity,
            command_capacity: self.command_capacity,
            event_capacity: self.event_capacity,
            state_bytes: self.state_bytes,
        }
    }
}

/// A copy of a slot's control block, read field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotSnapshot {
    /// Lifecycle state.
    pub state: SlotState,
    /// Incarnation number (bumped by every (re)creation).
    pub generation: u32,
    /// Bumped by every step that was not stalled.
    pub heartbeat: u64,
    /// Messages processed by this incarnation.
    pub messages_processed: u64,
    /// The failure code, if the slot failed.
    pub last_error: Option<DeviceCode>,
    /// Behaviour id.
    pub behaviour: BehaviourId,
    /// Device inbox head (consumed) and host inbox tail (written).
    pub inbox: (u32, u32),
    /// Host outbox head (read) and device outbox tail (written).
    pub outbox: (u32, u32),
    /// Kernel-to-kernel messages sent, received, dropped (dropped: over the slot's lifetime).
    pub k2k: (u32, u32, u32),
    /// Malformed envelopes answered with an error by this incarnation.
    pub bad_envelopes: u32,
    /// Hybrid logical clock.
    pub hlc: u64,
}

/// Device-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Messages written into inboxes.
    pub messages_sent: u64,
    /// Replies read from outboxes (including error replies).
    pub replies: u64,
    /// Error replies among them.
    pub error_replies: u64,
    /// Messages handed back: still queued at a kill or restart.
    pub undelivered_left_in_inbox: u64,
    /// Messages handed back: being processed when the actor crashed.
    pub undelivered_in_flight: u64,
    /// Events read from the event ring.
    pub events: u64,
    /// Block 0's heartbeat.
    pub supervisor_heartbeat: u64,
    /// Commands block 0 processed.
    pub commands_processed: u64,
}

/// A fault to inject through a slot's control block; executed by the device code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail with `Injected` on the next message.
    CrashNextMessage,
    /// Stop making progress (and stop the heartbeat) until cleared.
    Stall,
    /// Clear a `Stall`.
    ClearStall,
    /// Handle the next host message as a corrupt envelope: it is answered with a `BadEnvelope` error (and
    /// counted in `bad_envelopes`); the actor keeps running.
    CorruptNextEnvelope,
    /// Stuck inside the behaviour for good: no progress, no heartbeat, and requests (kill, restart, drain)
    /// are never acknowledged, as a GPU block spinning in user code. Only [`Device::quarantine`] gets the
    /// host past it.
    Wedge,
}

/// A fault of the whole device, carried out by the device code through the grid header
/// (see [`Device::inject_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFault {
    /// Every block, block 0 included, stops making progress (and block 0's heartbeat stops) until `Resume`.
    Stall,
    /// Ends a `Stall`.
    Resume,
    /// The persistent kernel stops for good (the CUDA kernel leaves): the device will be declared lost.
    Halt,
}

/// Whether the device is answering, judged from block 0's heartbeat (see [`Device::health`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceHealth {
    /// Block 0's heartbeat is moving.
    Running,
    /// Block 0's heartbeat has not moved for this long (a stalled executor); lost past
    /// [`DeviceConfig::lost_after`].
    Unresponsive(Duration),
    /// Declared lost: every operation fails with [`DeviceError::DeviceLost`].
    Lost,
}

/// Default of [`DeviceConfig::lost_after`].
pub const DEFAULT_LOST_AFTER: Duration = Duration::from_secs(3);
/// Block 0's heartbeat stale this long: the device is reported [`DeviceHealth::Unresponsive`].
const UNRESPONSIVE_AFTER: Duration = Duration::from_millis(250);
/// How often the poller looks at block 0's heartbeat.
const HEARTBEAT_CHECK_EVERY: Duration = Duration::from_millis(5);

/// A command submitted to block 0; resolves when the device reports its outcome.
pub struct PendingCommand {
    cmd_id: u64,
    slot: u32,
    completion: Arc<Completion<Result<SlotEvent, DeviceError>>>,
    device: Weak<DeviceInner>,
}

impl std::fmt::Debug for PendingCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCommand").field("cmd_id", &self.cmd_id).field("slot", &self.slot).finish()
    }
}

impl PendingCommand {
    /// The command's id (also in the resulting event).
    pub fn id(&self) -> u64 {
        self.cmd_id
    }

    /// Polls the device in the poller's place for a short while (see `DeviceInner::assist`).
    fn assisted(&self, deadline: Instant) -> Option<Result<SlotEvent, DeviceError>> {
        self.device.upgrade().and_then(|d| d.assist(&self.completion, deadline))
    }

    /// Waits for the outcome from sync code.
    pub fn wait_blocking(self, timeout: Duration) -> Result<SlotEvent, DeviceError> {
        if let Some(out) = self.assisted(Instant::now() + timeout) {
            return out;
        }
        match self.completion.wait_blocking(timeout) {
            Some(r) => r,
            None => Err(self.timed_out()),
        }
    }

    /// Waits for the outcome from async code.
    pub async fn wait(self, timeout: Duration) -> Result<SlotEvent, DeviceError> {
        if let Some(out) = self.assisted(Instant::now() + timeout) {
            return out;
        }
        match self.completion.wait(timeout).await {
            Some(r) => r,
            None => Err(self.timed_out()),
        }
    }

    fn timed_out(&self) -> DeviceError {
        match self.device.upgrade() {
            Some(d) if !d.closed.load(Ordering::Acquire) => {
                tracing::warn!(slot = self.slot, cmd_id = self.cmd_id, "command outcome not seen before deadline");
                DeviceError::Timeout
            }
            _ => DeviceError::Closed,
        }
    }
}

/// A command as submitted, with every field explicit (see [`Device::submit`]).
#[derive(Clone, Debug)]
pub struct CommandRequest {
    /// What to do.
    pub op: CommandOp,
    /// The slot.
    pub slot: u32,
    /// The generation the command applies to; `None`: the host's latest knowledge.
    pub expected_generation: Option<u32>,
    /// Behaviour (Create / Restart).
    pub behaviour: Option<BehaviourId>,
    /// Init bytes (Create / Restart), at most 96.
    pub init: Vec<u8>,
}

struct PendingOp {
    cmd_id: u64,
    /// First inbox index of the new incarnation (Create/Restart), or the tail at submission.
    cutoff: u32,
    /// A Create or Restart: messages from `cutoff` on belong to the incarnation it brings up.
    recreate: bool,
    /// Restart: inbox cells from here on are not reusable until the outcome is read back.
    floor: Option<u32>,
    accepting_before: bool,
}

/// The host's bookkeeping of a slot, behind the slot's lock (which also serialises senders).
struct SlotHost {
    tail: u32,
    /// The device's inbox head as last read: room is computed from it, and the head (a line the device
    /// writes) is re-read only when it says the inbox is full, saving a cache-line transfer per send.
    cached_head: u32,
    generation: u32,
    state: SlotState,
    accepting: bool,
    pending: Option<PendingOp>,
    /// Inbox messages below this index are accounted for (processed or reported undelivered).
    reported_until: u32,
    poison_reported: Option<u32>,
    /// The inbox tail when the host learned the actor had failed: a Restart of the failed slot keeps the
    /// messages sent from here on for the new incarnation (they were sent to an actor being restarted).
    failed_tail: Option<u32>,
    fault_flags: u32,
    fault_seq: u32,
    /// Given up on (see [`Device::quarantine`]): refuses commands and messages until the device restarts.
    quarantined: bool,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    replies: AtomicU64,
    error_replies: AtomicU64,
    left_in_inbox: AtomicU64,
    in_flight: AtomicU64,
    events: AtomicU64,
}

type CommandWaiter = Arc<Completion<Result<SlotEvent, DeviceError>>>;
type CallWaiter = Arc<Completion<Result<Reply, DeviceError>>>;
/// A function called with every device event, on the thread that reads it (see [`Device::on_event`]).
pub type EventHook = dyn Fn(&SlotEvent) + Send + Sync;

/// Where a subscriber's events go.
enum Sink {
    Stream(Weak<StreamInner<SlotEvent>>),
    Hook(Weak<EventHook>),
}

/// A subscriber: an optional slot filter and its sink (dropped streams and hooks are pruned).
type Subscriber = (Option<u32>, Sink);

pub(crate) struct DeviceInner {
    grid: SharedGrid,
    executor: Box<dyn Executor>,
    behaviours: BehaviourSet,
    slots: Box<[Mutex<SlotHost>]>,
    command_tail: Mutex<u32>,
    command_timeout: Duration,
    next_cmd_id: AtomicU64,
    next_correlation: AtomicU64,
    commands: Mutex<HashMap<u64, CommandWaiter>>,
    calls: Mutex<HashMap<u64, CallWaiter>>,
    replies: Stream<Reply>,
    subscribers: Mutex<Vec<Subscriber>>,
    poller_parker: Arc<backend::cpu::Parker>,
    /// The poller's read positions. The poller thread holds the lock while it polls; a thread waiting for
    /// a reply may poll in its place when the lock is free (`poll_assist`), saving a thread hand-off.
    poll: Mutex<PollState>,
    closed: AtomicBool,
    /// Declared lost (implies `closed`).
    lost: AtomicBool,
    /// The device-wide fault bits the host has set (`RV_DEVICE_*`).
    device_faults: AtomicU32,
    lost_after: Option<Duration>,
    opened: Instant,
    /// When block 0's heartbeat was last seen moving, nanoseconds after `opened`.
    last_beat_ns: AtomicU64,
    counters: Counters,
}

/// A handle on an open device. Cheap to clone; the device shuts down when the last handle is dropped or on
/// [`Device::shutdown`].
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lowest inbox index still in use: a restart's reclaim floor if one is pending, else the device's
/// consumer index, read again only when the cached one leaves no room.
fn inbox_floor(grid: &SharedGrid, host: &mut SlotHost, slot: u32, capacity: u32) -> u32 {
    if let Some(floor) = host.pending.as_ref().and_then(|p| p.floor) {
        return floor;
    }
    if host.tail.wrapping_sub(host.cached_head) >= capacity {
        host.cached_head = grid.inbox_head(slot);
    }
    host.cached_head
}

/// `a` is at or after `b` in wrapping index order.
fn at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

impl Device {
    /// Opens a device: lays out the regions, starts the executor and the poller.
    pub fn open(config: DeviceConfig) -> Result<Device, DeviceError> {
        // A misspelt RINGVISOR_BACKEND must not pass unnoticed (the default fell back to the CPU backend).
        Backend::from_env()?;
        let header = backend::compute_layout(&config.params())?;
        let poller_parker = Arc::new(backend::cpu::Parker::new());
        let wake_poller = {
            let p = poller_parker.clone();
            Arc::new(move || p.wake()) as Arc<dyn Fn() + Send + Sync>
        };
        let executor: Box<dyn Executor> = match &config.backend {
            Backend::Cpu(cpu) => {
                Box::new(CpuExecutor::start(cpu.clone(), header, config.behaviours.host_table(), wake_poller)?)
            }
            Backend::Cuda(cuda) => {
                Box::new(backend::cuda::CudaExecutor::start(cuda.clone(), header, &config.behaviours)?)
            }
        };
        // SAFETY: the executor allocated `shared_bytes` at this address, wrote the header, and keeps the memory
        // alive for as long as it lives; DeviceInner owns the executor.
        let grid = unsafe { SharedGrid::new(executor.shared_base()) };
        let slots = (0..config.slots)
            .map(|_| {
                Mutex::new(SlotHost {
                    tail: 0,
                    cached_head: 0,
                    generation: 0,
                    state: SlotState::Dormant,
                    accepting: false,
                    pending: None,
                    reported_until: 0,
                    poison_reported: None,
                    failed_tail: None,
                    fault_flags: 0,
                    fault_seq: 0,
                    quarantined: false,
                })
            })
            .collect();
        tracing::info!(slots = config.slots, backend = %executor.describe(), "device open");
        let inner = Arc::new(DeviceInner {
            grid,
            executor,
            behaviours: config.behaviours.clone(),
            slots,
            command_tail: Mutex::new(0),
            command_timeout: config.command_timeout,
            next_cmd_id: AtomicU64::new(1),
            next_correlation: AtomicU64::new(1),
            commands: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            replies: Stream::new(),
            subscribers: Mutex::new(Vec::new()),
            poller_parker,
            poll: Mutex::new(PollState {
                sweep: Vec::new(),
                outbox_heads: vec![0; config.slots as usize],
                event_head: 0,
                heartbeat: 0,
                next_beat_check: Duration::ZERO,
            }),
            closed: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            device_faults: AtomicU32::new(0),
            lost_after: config.lost_after,
            opened: Instant::now(),
            last_beat_ns: AtomicU64::new(0),
            counters: Counters::default(),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("ringvisor-poller".into())
            .spawn(move || poller(weak))
            .map_err(|e| DeviceError::InvalidConfig(format!("cannot spawn the poller thread: {e}")))?;
        Ok(Device { inner })
    }

    /// Whether `other` is a handle on this same device (not merely one configured alike).
    pub fn same_device(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Slots on this device.
    pub fn slot_count(&self) -> u32 {
        self.inner.grid.slot_count()
    }

    /// Envelopes per inbox.
    pub fn inbox_capacity(&self) -> u32 {
        self.inner.grid.config().inbox_capacity
    }

    /// The behaviours this device knows.
    pub fn behaviours(&self) -> &BehaviourSet {
        &self.inner.behaviours
    }

    /// The executor, in words.
    pub fn describe(&self) -> String {
        self.inner.executor.describe()
    }

    /// Bytes of the two device regions: shared with the host (control blocks, rings, commands, events) and
    /// device-local (kernel-to-kernel rings, actor state, block-0 records).
    pub fn region_bytes(&self) -> (u64, u64) {
        let c = self.inner.grid.config();
        (c.shared_bytes, c.local_bytes)
    }

    fn check_slot(&self, slot: u32) -> Result<(), DeviceError> {
        if slot >= self.slot_count() {
            return Err(DeviceError::SlotOutOfRange { slot, slot_count: self.slot_count() });
        }
        Ok(())
    }

    fn check_open(&self) -> Result<(), DeviceError> {
        self.inner.check_open()
    }

    /// Creates an actor with `behaviour` in a Dormant or Terminated slot.
    pub fn create(&self, slot: u32, behaviour: impl AsBehaviour, init: &[u8]) -> Result<PendingCommand, DeviceError> {
        let behaviour = behaviour.resolve(&self.inner.behaviours)?;
        self.submit(CommandRequest {
            op: CommandOp::Create,
            slot,
            expected_generation: None,
            behaviour: Some(behaviour),
            init: init.to_vec(),
        })
    }

    /// Kills (if running) and re-creates the actor in `slot` with a new generation. Messages it had not
    /// consumed are handed back in the outcome; messages sent after this call wait for the new incarnation.
    /// For a Failed slot, the messages sent after the host learned of the failure wait too (they were sent
    /// to an actor about to be restarted); those queued before it are handed back.
    pub fn restart(&self, slot: u32, behaviour: impl AsBehaviour, init: &[u8]) -> Result<PendingCommand, DeviceError> {
        let behaviour = behaviour.resolve(&self.inner.behaviours)?;
        self.submit(CommandRequest {
            op: CommandOp::Restart,
            slot,
            expected_generation: None,
            behaviour: Some(behaviour),
            init: init.to_vec(),
        })
    }

    /// Terminates the actor in `slot` at its next message boundary; unconsumed messages are handed back.
    pub fn kill(&self, slot: u32) -> Result<PendingCommand, DeviceError> {
        self.submit(CommandRequest {
            op: CommandOp::Kill,
            slot,
            expected_generation: None,
            behaviour: None,
            init: Vec::new(),
        })
    }

    /// Stops accepting messages for `slot`; the actor finishes what it has, then terminates. The command
    /// resolves when draining starts; see [`Device::drain_and_wait`] to wait for the end.
    pub fn drain(&self, slot: u32) -> Result<PendingCommand, DeviceError> {
        self.submit(CommandRequest {
            op: CommandOp::Drain,
            slot,
            expected_generation: None,
            behaviour: None,
            init: Vec::new(),
        })
    }

    /// Drains `slot` and waits until it has terminated (or failed, or was killed).
    pub fn drain_and_wait(&self, slot: u32, timeout: Duration) -> Result<SlotEvent, DeviceError> {
        let events = self.subscribe_slot(slot)?;
        let deadline = Instant::now() + timeout;
        self.drain(slot)?.wait_blocking(timeout)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Some(e) if matches!(e.event.kind, EventKind::Drained | EventKind::Failed | EventKind::Killed) => {
                    return Ok(e)
                }
                Some(_) => continue,
                None => return Err(DeviceError::Timeout),
            }
        }
    }

    /// Cancels a drain: the actor accepts messages again.
    pub fn resume(&self, slot: u32) -> Result<PendingCommand, DeviceError> {
        self.submit(CommandRequest {
            op: CommandOp::Resume,
            slot,
            expected_generation: None,
            behaviour: None,
            init: Vec::new(),
        })
    }

    /// Submits a command with every field explicit. Checks what the host can check (slot range, behaviour,
    /// init length, one command in flight per slot) and returns an error before anything is written; the
    /// device checks the rest (legal transition, generation) and its rejection resolves the command with
    /// [`DeviceError::Rejected`].
    pub fn submit(&self, req: CommandRequest) -> Result<PendingCommand, DeviceError> {
        self.check_open()?;
        self.check_slot(req.slot)?;
        if req.init.len() > RV_INIT_BYTES as usize {
            return Err(DeviceError::PayloadTooLarge { len: req.init.len(), max: RV_INIT_BYTES as usize });
        }
        if let Some(b) = req.behaviour {
            b.resolve(&self.inner.behaviours)?;
        }
        let inner = &self.inner;
        let cmd_id = inner.next_cmd_id.fetch_add(1, Ordering::Relaxed);
        let mut host = lock(&inner.slots[req.slot as usize]);
        if host.quarantined {
            return Err(DeviceError::Quarantined { slot: req.slot });
        }
        if host.pending.is_some() {
            return Err(DeviceError::CommandInFlight { slot: req.slot });
        }
        // First inbox index of a new incarnation (Create/Restart); messages before it are handed back.
        let cutoff = match (req.op, host.failed_tail) {
            (CommandOp::Restart, Some(failed_tail)) if host.state == SlotState::Failed => failed_tail,
            _ => host.tail,
        };
        let mut raw = RawCommand {
            op: req.op.raw(),
            slot: req.slot,
            expected_generation: req.expected_generation.unwrap_or(host.generation),
            behaviour: req.behaviour.map(|b| b.0).unwrap_or(0),
            cmd_id,
            inbox_index: cutoff,
            init_len: req.init.len() as u32,
            init: [0; RV_INIT_BYTES as usize],
        };
        raw.init[..req.init.len()].copy_from_slice(&req.init);
        let floor = (req.op == CommandOp::Restart).then(|| inner.grid.inbox_head(req.slot));
        let completion = Arc::new(Completion::new());
        lock(&inner.commands).insert(cmd_id, completion.clone());
        if let Err(e) = self.push_command(&raw) {
            lock(&inner.commands).remove(&cmd_id);
            return Err(e);
        }
        host.pending = Some(PendingOp {
            cmd_id,
            cutoff,
            recreate: matches!(req.op, CommandOp::Create | CommandOp::Restart),
            floor,
            accepting_before: host.accepting,
        });
        host.accepting = match req.op {
            CommandOp::Create | CommandOp::Restart => true,
            CommandOp::Kill | CommandOp::Drain => false,
            CommandOp::Resume => host.accepting,
        };
        inner.grid.write_pending_op(req.slot, raw.op);
        drop(host);
        tracing::debug!(slot = req.slot, cmd_id, op = ?req.op, "command submitted");
        Ok(PendingCommand { cmd_id, slot: req.slot, completion, device: Arc::downgrade(inner) })
    }

    /// Writes a command record exactly as given, bypassing every host-side check and bookkeeping. For tests
    /// that prove the device validates what it reads; the outcome arrives through [`Device::subscribe`].
    #[doc(hidden)]
    pub fn submit_raw_command(&self, raw: RawCommand) -> Result<(), DeviceError> {
        self.check_open()?;
        self.push_command(&raw)
    }

    fn push_command(&self, raw: &RawCommand) -> Result<(), DeviceError> {
        let inner = &self.inner;
        let deadline = Instant::now() + inner.command_timeout;
        let mut tail = lock(&inner.command_tail);
        let capacity = inner.grid.config().command_capacity;
        let mut spins = 0u32;
        while tail.wrapping_sub(inner.grid.command_head()) >= capacity {
            if Instant::now() >= deadline {
                return Err(DeviceError::CommandRingFull);
            }
            inner.executor.wake();
            spins += 1;
            if spins > 64 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::thread::yield_now();
            }
        }
        inner.grid.write_command(*tail, raw);
        *tail = tail.wrapping_add(1);
        inner.grid.publish_command_tail(*tail);
        drop(tail);
        inner.executor.wake();
        Ok(())
    }

    /// Sends a one-way message (the actor does not reply). Fails at once if the inbox is full. Returns the
    /// message's correlation id.
    pub fn send(&self, slot: u32, payload: &[u8]) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, false, None)
    }

    /// Sends one-way messages to `slot` in one go: one lock, one tail publication and one wake-up for the
    /// whole batch (what a stream producer wants). Writes as many as fit in the inbox now, in order, and
    /// returns how many ([`DeviceError::InboxFull`] if none fits). A payload too large fails the call
    /// before anything is written.
    pub fn send_batch<P: AsRef<[u8]>>(&self, slot: u32, payloads: &[P]) -> Result<usize, DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        for p in payloads {
            check_payload(p.as_ref())?;
        }
        if payloads.is_empty() {
            return Ok(0);
        }
        let inner = &self.inner;
        let capacity = inner.grid.config().inbox_capacity;
        let mut host = lock(&inner.slots[slot as usize]);
        if !host.accepting {
            return Err(inner.refusal(&host, slot));
        }
        let floor = inbox_floor(&inner.grid, &mut host, slot, capacity);
        let room = capacity.saturating_sub(host.tail.wrapping_sub(floor)) as usize;
        let n = room.min(payloads.len());
        if n == 0 {
            return Err(DeviceError::InboxFull { slot });
        }
        let first = inner.next_correlation.fetch_add(n as u64, Ordering::Relaxed);
        let hlc = host_hlc();
        for (i, p) in payloads[..n].iter().enumerate() {
            let mut raw = Envelope::to_actor(slot, first + i as u64, p.as_ref(), false)?.to_raw();
            raw.hlc = hlc;
            inner.grid.write_inbox(slot, host.tail, &raw);
            host.tail = host.tail.wrapping_add(1);
        }
        inner.grid.publish_inbox_tail(slot, host.tail);
        drop(host);
        inner.counters.sent.fetch_add(n as u64, Ordering::Relaxed);
        inner.executor.wake();
        Ok(n)
    }

    /// Sends a one-way message, waiting up to `timeout` for room in the inbox.
    pub fn send_timeout(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, false, Some(Instant::now() + timeout))
    }

    /// Sends a message whose reply goes to [`Device::replies`], waiting up to `timeout` for room in the inbox.
    /// Returns the correlation id the reply will carry.
    pub fn post(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<u64, DeviceError> {
        self.write_message(slot, payload, true, Some(Instant::now() + timeout))
    }

    /// Sends a message and waits for its reply. The device's error answer comes back as
    /// [`DeviceError::ErrorReply`], a message handed back undelivered as [`DeviceError::Undelivered`].
    pub fn call(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        let deadline = Instant::now() + timeout;
        let (correlation, waiter) = self.start_call(slot, payload, deadline)?;
        let out = match self.assist_until_answered(&waiter, deadline) {
            Some(out) => Some(out),
            None => waiter.wait_blocking(deadline.saturating_duration_since(Instant::now())),
        };
        self.finish_call(correlation, out)
    }

    /// Async form of [`Device::call`]. Waiting for inbox room, if any, polls briefly.
    pub async fn call_async(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<Reply, DeviceError> {
        let deadline = Instant::now() + timeout;
        let (correlation, waiter) = loop {
            match self.start_call(slot, payload, Instant::now()) {
                Err(DeviceError::InboxFull { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_micros(100)).await
                }
                other => break other?,
            }
        };
        let out = match self.assist_until_answered(&waiter, deadline) {
            Some(out) => Some(out),
            None => waiter.wait(deadline.saturating_duration_since(Instant::now())).await,
        };
        self.finish_call(correlation, out)
    }

    fn assist_until_answered(&self, waiter: &CallWaiter, deadline: Instant) -> Option<Result<Reply, DeviceError>> {
        self.inner.assist(waiter, deadline)
    }

    fn start_call(&self, slot: u32, payload: &[u8], deadline: Instant) -> Result<(u64, CallWaiter), DeviceError> {
        let correlation = self.inner.next_correlation.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Completion::new());
        lock(&self.inner.calls).insert(correlation, waiter.clone());
        let env = match Envelope::to_actor(slot, correlation, payload, true) {
            Ok(env) => env,
            Err(e) => {
                lock(&self.inner.calls).remove(&correlation);
                return Err(e);
            }
        };
        if let Err(e) = self.write_envelope(slot, env, Some(deadline)) {
            lock(&self.inner.calls).remove(&correlation);
            return Err(e);
        }
        Ok((correlation, waiter))
    }

    fn finish_call(&self, correlation: u64, out: Option<Result<Reply, DeviceError>>) -> Result<Reply, DeviceError> {
        match out {
            Some(r) => r,
            None => {
                // A reply that arrives later goes to `replies()`.
                lock(&self.inner.calls).remove(&correlation);
                self.check_open()?;
                Err(DeviceError::Timeout)
            }
        }
    }

    fn write_message(
        &self,
        slot: u32,
        payload: &[u8],
        want_reply: bool,
        deadline: Option<Instant>,
    ) -> Result<u64, DeviceError> {
        let correlation = self.inner.next_correlation.fetch_add(1, Ordering::Relaxed);
        let env = Envelope::to_actor(slot, correlation, payload, want_reply)?;
        self.write_envelope(slot, env, deadline)?;
        Ok(correlation)
    }

    /// Writes an envelope as given (header fields included) into `slot`'s inbox. For tests that feed
    /// malformed envelopes to the device; the device answers those with an error reply.
    #[doc(hidden)]
    pub fn send_envelope(&self, slot: u32, env: Envelope) -> Result<(), DeviceError> {
        self.write_envelope(slot, env, None)
    }

    fn write_envelope(&self, slot: u32, env: Envelope, deadline: Option<Instant>) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        check_payload(env.payload())?;
        let inner = &self.inner;
        let capacity = inner.grid.config().inbox_capacity;
        let mut raw = env.to_raw();
        let mut spins = 0u32;
        loop {
            let mut host = lock(&inner.slots[slot as usize]);
            if !host.accepting {
                return Err(inner.refusal(&host, slot));
            }
            let floor = inbox_floor(&inner.grid, &mut host, slot, capacity);
            if host.tail.wrapping_sub(floor) < capacity {
                raw.hlc = host_hlc();
                inner.grid.write_inbox(slot, host.tail, &raw);
                host.tail = host.tail.wrapping_add(1);
                inner.grid.publish_inbox_tail(slot, host.tail);
                drop(host);
                inner.counters.sent.fetch_add(1, Ordering::Relaxed);
                inner.executor.wake();
                return Ok(());
            }
            drop(host);
            match deadline {
                Some(d) if Instant::now() < d => {
                    inner.executor.wake();
                    spins += 1;
                    if spins > 64 {
                        std::thread::sleep(Duration::from_micros(20));
                    } else {
                        std::thread::yield_now();
                    }
                }
                _ => return Err(DeviceError::InboxFull { slot }),
            }
        }
    }

    /// Replies to [`Device::post`] messages (and late replies to timed-out calls), in arrival order.
    pub fn replies(&self) -> Stream<Reply> {
        self.inner.replies.clone()
    }

    /// Every event of every slot, from now on.
    pub fn subscribe(&self) -> Stream<SlotEvent> {
        self.add_subscriber(None)
    }

    /// Calls `hook` with every event from now on, on the thread that reads it from the device (the poller,
    /// or a caller polling in its place), in event order, until the last `Arc` of the hook is dropped. No
    /// thread hand-off: the lowest-latency way to follow events. The hook must be quick, must not block,
    /// and must not call back into this device (it runs while events are being dispatched).
    pub fn on_event(&self, hook: &Arc<EventHook>) {
        lock(&self.inner.subscribers).push((None, Sink::Hook(Arc::downgrade(hook))));
    }

    /// Every event of `slot`, from now on.
    pub fn subscribe_slot(&self, slot: u32) -> Result<Stream<SlotEvent>, DeviceError> {
        self.check_slot(slot)?;
        Ok(self.add_subscriber(Some(slot)))
    }

    fn add_subscriber(&self, slot: Option<u32>) -> Stream<SlotEvent> {
        let stream = Stream::new();
        if self.inner.closed.load(Ordering::Acquire) {
            stream.close();
        }
        lock(&self.inner.subscribers).push((slot, Sink::Stream(stream.downgrade())));
        stream
    }

    /// Reads `slot`'s control block, one field at a time.
    pub fn snapshot(&self, slot: u32) -> Result<SlotSnapshot, DeviceError> {
        self.check_slot(slot)?;
        let b = self.inner.grid.snapshot(slot);
        Ok(SlotSnapshot {
            state: SlotState::from_raw(b.state),
            generation: b.generation,
            heartbeat: b.heartbeat,
            messages_processed: b.messages_processed,
            last_error: (b.last_error != 0).then(|| DeviceCode::from_raw(b.last_error)),
            behaviour: BehaviourId(b.behaviour),
            inbox: (b.inbox_head, b.inbox_tail),
            outbox: (b.outbox_head, b.outbox_tail),
            k2k: (b.k2k_sent, b.k2k_received, b.k2k_dropped),
            bad_envelopes: b.bad_envelopes,
            hlc: b.hlc,
        })
    }

    /// The generation and state of `slot` as the host last learned them from events.
    pub fn host_view(&self, slot: u32) -> Result<(u32, SlotState), DeviceError> {
        self.check_slot(slot)?;
        let host = lock(&self.inner.slots[slot as usize]);
        Ok((host.generation, host.state))
    }

    /// Injects a fault into `slot` through its control block; the device code carries it out.
    pub fn inject(&self, slot: u32, fault: Fault) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        let mut host = lock(&self.inner.slots[slot as usize]);
        match fault {
            Fault::CrashNextMessage => {
                host.fault_flags = (host.fault_flags | RV_FAULT_CRASH_NEXT) & !RV_FAULT_CORRUPT_NEXT;
                host.fault_seq = host.fault_seq.wrapping_add(1);
            }
            Fault::CorruptNextEnvelope => {
                host.fault_flags = (host.fault_flags | RV_FAULT_CORRUPT_NEXT) & !RV_FAULT_CRASH_NEXT;
                host.fault_seq = host.fault_seq.wrapping_add(1);
            }
            Fault::Stall => host.fault_flags |= RV_FAULT_STALL,
            Fault::ClearStall => host.fault_flags &= !RV_FAULT_STALL,
            Fault::Wedge => host.fault_flags |= RV_FAULT_WEDGE,
        }
        self.inner.grid.write_faults(slot, host.fault_flags, host.fault_seq);
        drop(host);
        self.inner.executor.wake();
        Ok(())
    }

    /// Injects a fault into the whole device through the grid header; the device code carries it out.
    pub fn inject_device(&self, fault: DeviceFault) -> Result<(), DeviceError> {
        self.check_open()?;
        // A halt is for good: a later Resume ends a stall only.
        let bits = match fault {
            DeviceFault::Stall => {
                self.inner.device_faults.fetch_or(RV_DEVICE_STALL, Ordering::AcqRel) | RV_DEVICE_STALL
            }
            DeviceFault::Resume => {
                self.inner.device_faults.fetch_and(!RV_DEVICE_STALL, Ordering::AcqRel) & !RV_DEVICE_STALL
            }
            DeviceFault::Halt => self.inner.device_faults.fetch_or(RV_DEVICE_HALT, Ordering::AcqRel) | RV_DEVICE_HALT,
        };
        tracing::warn!(?fault, "device fault injected");
        self.inner.grid.write_device_faults(bits);
        self.inner.executor.wake();
        Ok(())
    }

    /// Whether the device answers: block 0's heartbeat, as the poller last saw it. A heartbeat stale past
    /// [`DeviceConfig::lost_after`] makes the poller declare the device lost: what it had not processed is
    /// handed back (a [`EventKind::DeviceLost`] event per slot, reason [`UndeliveredReason::DeviceLost`]),
    /// waiting calls and commands fail with [`DeviceError::DeviceLost`], and so does every later operation.
    /// A lost device is not reopened in place: open a new one (the runtime does, see `ringvisor::Runtime`).
    pub fn health(&self) -> DeviceHealth {
        self.inner.health()
    }

    /// How long since block 0's heartbeat was last seen moving (the poller looks every few milliseconds; an
    /// idle CPU backend beats at least every `park_max`). Long for every slot at once = the executor stalls.
    pub fn heartbeat_age(&self) -> Duration {
        self.inner.heartbeat_age()
    }

    /// Gives up on `slot`, whose actor does not acknowledge commands (stuck inside its behaviour; a GPU block
    /// cannot be preempted): the slot refuses commands and messages with [`DeviceError::Quarantined`] until
    /// the device restarts, its queued messages are handed back (an [`EventKind::Quarantined`] event, reason
    /// [`UndeliveredReason::Quarantined`]), a command in flight on it fails with the same error, and the
    /// device code is told never to run it again (the wedge bit). Idempotent.
    pub fn quarantine(&self, slot: u32) -> Result<(), DeviceError> {
        self.check_open()?;
        self.check_slot(slot)?;
        self.inner.quarantine(slot);
        Ok(())
    }

    /// Whether `slot` is quarantined.
    pub fn is_quarantined(&self, slot: u32) -> bool {
        slot < self.slot_count() && lock(&self.inner.slots[slot as usize]).quarantined
    }

    /// Device-wide counters.
    pub fn stats(&self) -> DeviceStats {
        let c = &self.inner.counters;
        let (hb, cmds, _) = self.inner.grid.supervisor_counters();
        DeviceStats {
            messages_sent: c.sent.load(Ordering::Relaxed),
            replies: c.replies.load(Ordering::Relaxed),
            error_replies: c.error_replies.load(Ordering::Relaxed),
            undelivered_left_in_inbox: c.left_in_inbox.load(Ordering::Relaxed),
            undelivered_in_flight: c.in_flight.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            supervisor_heartbeat: hb,
            commands_processed: cmds,
        }
    }

    /// Stops the executor and the poller. Messages the device had not consumed are handed back (an
    /// [`EventKind::DeviceStopped`] event per slot, reason [`UndeliveredReason::LeftInInbox`]); commands and
    /// calls still waiting then resolve with [`DeviceError::Closed`]; streams close. Idempotent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

/// The host's hybrid-logical-clock stamp for a message: wall-clock milliseconds in the high 48 bits.
fn host_hlc() -> u64 {
    let ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    ms << 16
}

impl DeviceInner {
    fn check_open(&self) -> Result<(), DeviceError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(if self.lost.load(Ordering::Acquire) { DeviceError::DeviceLost } else { DeviceError::Closed });
        }
        Ok(())
    }

    /// Why a slot that does not accept messages refuses this one.
    fn refusal(&self, host: &SlotHost, slot: u32) -> DeviceError {
        if self.lost.load(Ordering::Acquire) {
            DeviceError::DeviceLost
        } else if host.quarantined {
            DeviceError::Quarantined { slot }
        } else {
            DeviceError::NotAccepting { slot, state: host.state }
        }
    }

    fn heartbeat_age(&self) -> Duration {
        let seen = Duration::from_nanos(self.last_beat_ns.load(Ordering::Acquire));
        self.opened.elapsed().saturating_sub(seen)
    }

    fn health(&self) -> DeviceHealth {
        if self.lost.load(Ordering::Acquire) {
            return DeviceHealth::Lost;
        }
        let stale = self.heartbeat_age();
        if stale >= UNRESPONSIVE_AFTER {
            DeviceHealth::Unresponsive(stale)
        } else {
            DeviceHealth::Running
        }
    }

    /// Called by the poller after each poll: follows block 0's heartbeat and declares the device lost when
    /// it has been stale for `lost_after`. Returns true if it did.
    fn watch_heartbeat(&self, st: &mut PollState) -> bool {
        // Block 0 writes its heartbeat line all the time: reading it on every poll would bounce that line
        // between the poller's core and block 0's. Every few milliseconds is plenty for a bound in seconds.
        let now = self.opened.elapsed();
        if now < st.next_beat_check {
            return false;
        }
        st.next_beat_check = now + HEARTBEAT_CHECK_EVERY;
        let (beat, _, _) = self.grid.supervisor_counters();
        if beat != st.heartbeat {
            st.heartbeat = beat;
            self.last_beat_ns.store(now.as_nanos() as u64, Ordering::Release);
            return false;
        }
        let stale = now.saturating_sub(Duration::from_nanos(self.last_beat_ns.load(Ordering::Acquire)));
        match self.lost_after {
            Some(limit) if stale >= limit => {
                self.declare_lost(st, stale);
                true
            }
            _ => {
                if stale >= UNRESPONSIVE_AFTER {
                    self.executor.wake(); // a parked executor would have beaten by now: make sure it is awake
                }
                false
            }
        }
    }

    /// The device stopped answering: stop it, read what it did publish, hand back what it had not processed,
    /// and fail everything still waiting with [`DeviceError::DeviceLost`].
    fn declare_lost(&self, st: &mut PollState, stale: Duration) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.lost.store(true, Ordering::Release);
        tracing::error!(?stale, "device lost: block 0's heartbeat stopped");
        self.grid.write_device_faults(RV_DEVICE_HALT);
        self.stop_executor(st, EventKind::DeviceLost, UndeliveredReason::DeviceLost, DeviceError::DeviceLost);
    }

    /// Stops the executor, reads what it published before it stopped, hands back what it had not consumed
    /// (as host-made `kind` events, with `reason`), then fails everything still waiting with `error`.
    fn stop_executor(&self, st: &mut PollState, kind: EventKind, reason: UndeliveredReason, error: DeviceError) {
        self.grid.request_terminate();
        self.executor.shutdown();
        self.poll_once(&mut st.sweep, &mut st.outbox_heads, &mut st.event_head);
        self.hand_back_all(kind, reason);
        self.close_waiters(error);
    }

    /// After the executor stopped: every slot's unconsumed messages are handed back, one host-made event of
    /// `kind` per slot that was ever used.
    fn hand_back_all(&self, kind: EventKind, reason: UndeliveredReason) {
        for slot in 0..self.grid.slot_count() {
            let mut host = lock(&self.slots[slot as usize]);
            let live = !matches!(host.state, SlotState::Dormant) || host.tail != host.reported_until;
            let event = self.hand_back_queued(&mut host, slot, kind, reason);
            drop(host);
            if live {
                self.dispatch(event);
            }
        }
    }

    /// Host-side quarantine of a slot (see [`Device::quarantine`]).
    fn quarantine(&self, slot: u32) {
        let mut host = lock(&self.slots[slot as usize]);
        if host.quarantined {
            return;
        }
        host.quarantined = true;
        host.fault_flags |= RV_FAULT_WEDGE;
        self.grid.write_faults(slot, host.fault_flags, host.fault_seq);
        if let Some(p) = host.pending.take() {
            self.grid.write_pending_op(slot, RV_OP_NONE);
            if let Some(w) = lock(&self.commands).remove(&p.cmd_id) {
                w.complete(Err(DeviceError::Quarantined { slot }));
            }
        }
        let event = self.hand_back_queued(&mut host, slot, EventKind::Quarantined, UndeliveredReason::Quarantined);
        drop(host);
        tracing::warn!(slot, "slot quarantined");
        self.dispatch(event);
    }

    /// Stops `slot` accepting messages and hands back every message it has not consumed, as a host-made
    /// event of `kind` (the caller dispatches it).
    fn hand_back_queued(
        &self,
        host: &mut SlotHost,
        slot: u32,
        kind: EventKind,
        reason: UndeliveredReason,
    ) -> SlotEvent {
        host.accepting = false;
        let head = self.grid.inbox_head(slot);
        let mut undelivered = Vec::new();
        self.read_back(host, slot, head, host.tail, reason, &mut undelivered);
        let event = DeviceEvent {
            kind,
            slot,
            generation: host.generation,
            state: host.state,
            code: None,
            cmd_id: 0,
            messages_processed: self.grid.snapshot(slot).messages_processed,
            k2k_dropped: 0,
            time_ns: 0,
            inbox_head: head,
            failed_index: RV_NO_INDEX,
        };
        self.settle_undelivered(&undelivered);
        SlotEvent { event, undelivered }
    }

    fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = lock(&self.poll);
        self.stop_executor(&mut st, EventKind::DeviceStopped, UndeliveredReason::LeftInInbox, DeviceError::Closed);
        tracing::info!("device shut down");
    }

    /// Fails every waiting command and call with `error` and closes every stream.
    fn close_waiters(&self, error: DeviceError) {
        self.poller_parker.wake();
        for (_, w) in lock(&self.commands).drain() {
            w.complete(Err(error.clone()));
        }
        for (_, w) in lock(&self.calls).drain() {
            w.complete(Err(error.clone()));
        }
        self.replies.close();
        for (_, sink) in lock(&self.subscribers).drain(..) {
            if let Sink::Stream(s) = sink {
                if let Some(s) = s.upgrade() {
                    Stream::close_inner(&s);
                }
            }
        }
    }

    /// Polls the device in the poller's place for a short while (an answer through a running kernel usually
    /// comes within it), so the answer does not wait for the poller thread to wake.
    fn assist<T>(&self, completion: &Completion<T>, deadline: Instant) -> Option<T> {
        let until = (Instant::now() + ASSIST_SPIN).min(deadline);
        loop {
            if let Some(out) = completion.try_take() {
                return Some(out);
            }
            if Instant::now() >= until {
                return None;
            }
            self.poll_assist();
            std::hint::spin_loop();
        }
    }

    /// Polls once in the poller's place if no one else is polling (see [`DeviceInner::poll`]).
    fn poll_assist(&self) {
        if let Ok(mut st) = self.poll.try_lock() {
            let st = &mut *st;
            self.poll_once(&mut st.sweep, &mut st.outbox_heads, &mut st.event_head);
        }
    }

    /// Reads events and outboxes once. Returns true if it found anything.
    fn poll_once(&self, sweep: &mut Vec<u32>, outbox_heads: &mut [u32], event_head: &mut u32) -> bool {
        let mut work = false;
        sweep.clear();
        let tail = self.grid.event_tail();
        while *event_head != tail {
            let raw = self.grid.read_event(*event_head);
            *event_head = event_head.wrapping_add(1);
            self.grid.release_events(*event_head);
            self.handle_event(&raw);
            // block 0 may have answered discarded kernel-to-kernel messages in this slot's outbox
            if raw.slot < self.grid.slot_count() {
                sweep.push(raw.slot);
            }
            work = true;
        }
        match self.executor.dirty_slots() {
            Some(dirty) => {
                dirty.drain(|s| sweep.push(s));
            }
            None => sweep.extend(0..self.grid.slot_count()),
        }
        for &slot in sweep.iter() {
            work |= self.drain_outbox(slot, &mut outbox_heads[slot as usize]);
        }
        work
    }

    fn drain_outbox(&self, slot: u32, head: &mut u32) -> bool {
        let tail = self.grid.outbox_tail(slot);
        let available = tail.wrapping_sub(*head);
        if available == 0 {
            return false;
        }
        let capacity = self.grid.config().outbox_capacity;
        if available > capacity {
            tracing::error!(slot, head = *head, tail, "impossible outbox tail from the device; ignoring it");
            return false;
        }
        while *head != tail {
            let raw = self.grid.read_outbox(slot, *head);
            *head = head.wrapping_add(1);
            self.grid.release_outbox(slot, *head);
            self.route_reply(slot, Envelope::from_raw(&raw));
        }
        self.executor.wake();
        true
    }

    fn route_reply(&self, slot: u32, env: Envelope) {
        self.counters.replies.fetch_add(1, Ordering::Relaxed);
        let reply = Reply::from_envelope(slot, env);
        if reply.is_error() {
            self.counters.error_replies.fetch_add(1, Ordering::Relaxed);
        }
        let waiter = lock(&self.calls).remove(&reply.correlation);
        match waiter {
            Some(w) => w.complete(match reply.payload() {
                Err(e) => Err(e),
                Ok(_) => Ok(reply),
            }),
            None => self.replies.push(reply),
        }
    }

    fn handle_event(&self, raw: &RawEvent) {
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        let event = DeviceEvent::from_raw(raw);
        tracing::debug!(slot = event.slot, kind = ?event.kind, generation = event.generation, code = ?event.code, "device event");
        let mut undelivered = Vec::new();
        if event.slot < self.grid.slot_count() {
            let mut host = lock(&self.slots[event.slot as usize]);
            let pending_matches = host.pending.as_ref().is_some_and(|p| p.cmd_id == event.cmd_id && event.cmd_id != 0);
            match event.kind {
                EventKind::Created | EventKind::Restarted | EventKind::CreateFailed => {
                    let cutoff = match &host.pending {
                        Some(p) if pending_matches => p.cutoff,
                        _ => self.grid.inbox_head(event.slot),
                    };
                    self.collect_leftovers(&mut host, &event, cutoff, &mut undelivered);
                    host.generation = event.generation;
                    host.poison_reported = None;
                    host.failed_tail = None;
                    host.accepting = true;
                }
                EventKind::Killed | EventKind::Drained => {
                    // Messages sent after a Create/Restart that is already in flight are for the next
                    // incarnation, not leftovers of this one.
                    let recreate = host.pending.as_ref().filter(|p| p.recreate && !pending_matches).map(|p| p.cutoff);
                    let cutoff = recreate.unwrap_or(host.tail);
                    self.collect_leftovers(&mut host, &event, cutoff, &mut undelivered);
                    if recreate.is_none() {
                        host.accepting = false;
                    }
                }
                EventKind::Failed => {
                    host.failed_tail = Some(host.tail);
                    if event.failed_index != RV_NO_INDEX && host.poison_reported.is_none() {
                        let env = Envelope::from_raw(&self.grid.read_inbox(event.slot, event.failed_index));
                        undelivered.push(Undelivered {
                            slot: event.slot,
                            envelope: env,
                            reason: UndeliveredReason::InFlightAtCrash,
                        });
                        host.poison_reported = Some(event.failed_index);
                    }
                }
                EventKind::Draining => host.accepting = false,
                EventKind::Resumed => host.accepting = true,
                EventKind::Rejected => {
                    if let Some(p) = host.pending.as_ref().filter(|_| pending_matches) {
                        host.accepting = p.accepting_before;
                    }
                }
                // Host-made kinds never come from the device's ring.
                EventKind::Unknown(_) | EventKind::DeviceLost | EventKind::DeviceStopped | EventKind::Quarantined => {}
            }
            if event.kind != EventKind::Rejected {
                host.state = event.state;
            }
            if pending_matches {
                host.pending = None;
                self.grid.write_pending_op(event.slot, RV_OP_NONE);
            }
        }
        self.settle_undelivered(&undelivered);
        let slot_event = SlotEvent { event, undelivered };
        if slot_event.event.cmd_id != 0 {
            if let Some(w) = lock(&self.commands).remove(&slot_event.event.cmd_id) {
                let result = match slot_event.event.kind {
                    EventKind::Rejected => Err(DeviceError::Rejected {
                        slot: slot_event.event.slot,
                        code: slot_event.event.code.unwrap_or(DeviceCode::Other(0)),
                    }),
                    EventKind::CreateFailed => Err(DeviceError::CreateFailed {
                        slot: slot_event.event.slot,
                        code: slot_event.event.code.unwrap_or(DeviceCode::Other(0)),
                    }),
                    _ => Ok(slot_event.clone()),
                };
                w.complete(result);
            }
        }
        self.dispatch(slot_event);
    }

    /// Counts messages handed back and fails the calls waiting for them.
    fn settle_undelivered(&self, undelivered: &[Undelivered]) {
        for u in undelivered {
            let counter = match u.reason {
                UndeliveredReason::InFlightAtCrash => &self.counters.in_flight,
                _ => &self.counters.left_in_inbox,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if let Some(w) = lock(&self.calls).remove(&u.envelope.correlation) {
                w.complete(Err(DeviceError::Undelivered { slot: u.slot, reason: u.reason }));
            }
        }
    }

    /// Hands an event to every subscriber that wants it (pruning dropped ones).
    fn dispatch(&self, slot_event: SlotEvent) {
        let mut subs = lock(&self.subscribers);
        let wanted = |filter: &Option<u32>| filter.is_none_or(|f| f == slot_event.event.slot);
        subs.retain(|(filter, sink)| match sink {
            Sink::Stream(weak) => match weak.upgrade() {
                Some(s) => {
                    if wanted(filter) {
                        Stream::push_to(&s, slot_event.clone());
                    }
                    true
                }
                None => false,
            },
            Sink::Hook(weak) => match weak.upgrade() {
                Some(hook) => {
                    if wanted(filter) {
                        hook(&slot_event);
                    }
                    true
                }
                None => false,
            },
        });
    }

    /// Reads back the messages in `[max(event.inbox_head, reported_until), cutoff)` that the previous
    /// incarnation never consumed, and marks them accounted for.
    fn collect_leftovers(&self, host: &mut SlotHost, event: &DeviceEvent, cutoff: u32, out: &mut Vec<Undelivered>) {
        let slot = event.slot;
        if event.failed_index != RV_NO_INDEX
            && host.poison_reported.is_none()
            && !at_or_after(event.failed_index, cutoff)
        {
            let env = Envelope::from_raw(&self.grid.read_inbox(slot, event.failed_index));
            out.push(Undelivered { slot, envelope: env, reason: UndeliveredReason::InFlightAtCrash });
            host.poison_reported = Some(event.failed_index);
        }
        if event.inbox_head == RV_NO_INDEX {
            host.reported_until = cutoff;
            return;
        }
        self.read_back(host, slot, event.inbox_head, cutoff, UndeliveredReason::LeftInInbox, out);
    }

    /// Reads back the messages in `[max(head, reported_until), cutoff)` (all but a poison message already
    /// reported) as undelivered with `reason`, and marks everything below `cutoff` accounted for. A range
    /// wider than the inbox is not a real window: it is only marked.
    fn read_back(
        &self,
        host: &mut SlotHost,
        slot: u32,
        head: u32,
        cutoff: u32,
        reason: UndeliveredReason,
        out: &mut Vec<Undelivered>,
    ) {
        let mut start = head;
        if at_or_after(host.reported_until, start) {
            start = host.reported_until;
        }
        if at_or_after(cutoff, start) && cutoff.wrapping_sub(start) <= self.grid.config().inbox_capacity {
            let mut i = start;
            while i != cutoff {
                if host.poison_reported != Some(i) {
                    let envelope = Envelope::from_raw(&self.grid.read_inbox(slot, i));
                    out.push(Undelivered { slot, envelope, reason });
                }
                i = i.wrapping_add(1);
            }
        }
        host.reported_until = cutoff;
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Where the host has read the event ring and each outbox up to.
struct PollState {
    sweep: Vec<u32>,
    outbox_heads: Vec<u32>,
    event_head: u32,
    /// Block 0's heartbeat as last seen.
    heartbeat: u64,
    /// When to look at block 0's heartbeat next (time since the device opened).
    next_beat_check: Duration,
}

/// How long a thread waiting for a reply polls the device itself before it sleeps.
const ASSIST_SPIN: Duration = Duration::from_micros(50);

/// The poller thread: reads events and outboxes until the device is dropped or shut down.
fn poller(device: Weak<DeviceInner>) {
    let mut backoff = backend::cpu::Backoff::new(256, Duration::from_millis(2));
    let parker = match device.upgrade() {
        Some(d) => d.poller_parker.clone(),
        None => return,
    };
    loop {
        let seen = parker.epoch();
        let work = {
            let Some(d) = device.upgrade() else { return };
            if d.closed.load(Ordering::Acquire) {
                return;
            }
            let mut st = lock(&d.poll);
            let st = &mut *st;
            let work = d.poll_once(&mut st.sweep, &mut st.outbox_heads, &mut st.event_head);
            if d.watch_heartbeat(st) {
                return;
            }
            work
        };
        if work {
            backoff.reset();
        } else {
            backoff.idle(&parker, seen);
        }
    }
}
