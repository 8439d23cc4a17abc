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
//! [`Device::call_async`], [`Stream::recv`]). A host thread (the *poller*, `poll.rs`) reads the event ring and
//! the outboxes and routes what it finds: command outcomes to their [`PendingCommand`], replies to
//! [`Device::call`] waiters or to [`Device::replies`], and every event to the subscribers of
//! [`Device::subscribe`].
//!
//! ## No message is lost silently
//! Every message written to an inbox is, exactly once: processed (and answered, unless sent with
//! [`Device::send`]), or handed back as [`Undelivered`](crate::Undelivered) in the
//! [`SlotEvent`](crate::SlotEvent) of the kill, restart or failure that made it undeliverable
//! (`accounting.rs`). Messages that cannot be written (full inbox past the deadline, slot not accepting,
//! payload too large) are refused with an error before anything is written.
//!
//! One file per job: `config.rs` (sizes, backend), `commands.rs` (block 0's commands), `messages.rs` (sends and
//! calls; `correlation.rs` their ids, `waiters.rs` the calls in flight), `subscribers.rs` (events and replies),
//! `snapshot.rs` (control blocks, counters), `faults.rs` (fault injection), `grants.rs` (restarts block 0 carries
//! out under the host's grant), `health.rs` (heartbeat, loss, shutdown), `accounting.rs` (exactly-once hand-back),
//! `routing.rs` (kernel-to-kernel messages between devices), `poll.rs` (the poller).

mod accounting;
mod commands;
mod config;
mod correlation;
mod faults;
mod grants;
mod health;
mod inbox;
mod messages;
mod outbox;
mod poll;
mod routing;
mod sender;
mod snapshot;
mod subscribers;
mod trace;
mod waiters;

pub use commands::{CommandRequest, PendingCommand};
pub use config::DeviceConfig;
pub use faults::{DeviceFault, SlotFault};
pub use health::{DeviceHealth, UNRESPONSIVE_AFTER};
pub use routing::{Router, Unroutable, UnroutableHook, DEFAULT_HOLD_LIMIT};
pub use sender::{SlotSender, DEFAULT_SENDER_BATCH, DEFAULT_SENDER_DELAY, DEFAULT_SENDER_TIMEOUT};
pub use snapshot::{DeviceStats, SlotActivity, SlotSnapshot};
pub use subscribers::EventHook;
pub use trace::{CallTrace, DeviceStamps};

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use accounting::SlotHost;
use outbox::OutboxCursor;
use poll::PollState;
use subscribers::Subscribers;

use crate::backend::{self, Backend, Executor};
use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::event::SlotEvent;
use crate::message::Reply;
use crate::shared::SharedGrid;
use crate::spin_lock::SpinLock;
use crate::sync::{Completion, Stream};

/// Waits for a command's outcome.
pub(super) type CommandWaiter = Arc<Completion<Result<SlotEvent, DeviceError>>>;

/// What every handle of one device shares: the regions (through the executor), the host's per-slot state, the
/// waiters, the subscribers and the poller's positions. Its methods live in the file of their job.
pub(crate) struct DeviceInner {
    grid: SharedGrid,
    executor: Box<dyn Executor>,
    behaviours: BehaviourSet,
    slots: Box<[SpinLock<SlotHost>]>,
    command_tail: Mutex<u32>,
    command_timeout: Duration,
    next_cmd_id: AtomicU64,
    commands: Mutex<IdMap<CommandWaiter>>,
    calls: SpinLock<waiters::Calls>,
    replies: Stream<Reply>,
    subscribers: Mutex<Subscribers>,
    poller_bell: Arc<poll::PollerBell>,
    /// The poller's read positions. The poller thread holds the lock while it polls; a thread waiting for
    /// a reply may poll in its place when the lock is free (`poll_assist`), saving a thread hand-off.
    poll: SpinLock<PollState>,
    closed: AtomicBool,
    /// Declared lost (implies `closed`).
    lost: AtomicBool,
    /// Why the device was declared lost.
    loss_cause: Mutex<Option<String>>,
    /// The device-wide fault bits the host has set (`RV_DEVICE_*`).
    device_faults: AtomicU32,
    lost_after: Option<Duration>,
    /// The slice the device's threads ask for, lent to a caller while it yields ([`crate::thread_slice::LentSlice`]).
    thread_slice: Option<Duration>,
    opened: Instant,
    /// When block 0's heartbeat was last seen moving, nanoseconds after `opened`.
    last_beat_ns: AtomicU64,
    counters: Counters,
    /// The router this device's routed sends go through, and this device's index there (`routing.rs`).
    route: std::sync::RwLock<Option<(Arc<routing::RouterInner>, u32)>>,
    /// Held by a traced call (`trace.rs`): the grid header holds one trace record.
    trace: Mutex<()>,
    /// The buffers of this device's coalescing senders (`sender.rs`), for the poller to publish when due.
    senders: Mutex<Vec<std::sync::Weak<sender::SenderBuffer>>>,
}

/// A handle on an open device. Cheap to clone; the device shuts down when the last handle is dropped (on the
/// thread that drops it: when that drop returns, the executor has stopped and a GPU's resident blocks are free for
/// another device) or on [`Device::shutdown`].
#[derive(Clone)]
pub struct Device {
    /// Dropped before `inner` (declaration order): the last handle's shutdown runs while this handle still holds
    /// the device, so no other thread can be the one that drops it last.
    _handles: Arc<LastHandle>,
    inner: Arc<DeviceInner>,
}

/// Shared by a device's handles: the last one dropped shuts the device down. The device's own threads hold it
/// for moments (the poller during each poll), so without this the last handle's drop could leave the shutdown to
/// one of them, later: an immediate reopen on a GPU with no room for two grids failed.
struct LastHandle(Weak<DeviceInner>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        if let Some(device) = self.0.upgrade() {
            device.shutdown();
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("slots", &self.slot_count())
            .field("executor", &self.describe())
            .field("health", &self.health())
            .finish()
    }
}

impl Device {
    /// Opens a device: lays out the regions, starts the executor and the poller.
    pub fn open(config: DeviceConfig) -> Result<Device, DeviceError> {
        // A misspelt RINGVISOR_BACKEND must not pass unnoticed (the default fell back to the CPU backend).
        Backend::from_env()?;
        let header = backend::compute_layout(&config.params())?;
        let poller_bell = Arc::new(poll::PollerBell::new());
        let host_side = Arc::new(poll::HostReader::new(poller_bell.clone()));
        let executor =
            backend::start(&config.backend, header, &config.behaviours, host_side.clone(), config.host_threads())?;
        // SAFETY: the executor allocated `shared_bytes` at this address, wrote the header, and keeps the memory
        // alive for as long as it lives; DeviceInner owns the executor.
        let grid = unsafe { SharedGrid::new(executor.shared_base()) };
        let slots = (0..config.slots).map(|_| SpinLock::new(SlotHost::dormant())).collect();
        tracing::info!(slots = config.slots, backend = %executor.describe(), "device open");
        let inner = Arc::new(DeviceInner {
            grid,
            executor,
            behaviours: config.behaviours.clone(),
            slots,
            command_tail: Mutex::new(0),
            command_timeout: config.command_timeout,
            next_cmd_id: AtomicU64::new(1),
            commands: Mutex::new(IdMap::default()),
            calls: SpinLock::new(waiters::Calls::default()),
            replies: Stream::new(),
            subscribers: Mutex::new(Subscribers::default()),
            poller_bell,
            poll: SpinLock::new(PollState {
                sweep: Vec::new(),
                outboxes: vec![OutboxCursor::default(); config.slots as usize],
                held: Vec::new(),
                event_head: 0,
                progress: (0, 0, 0),
                next_beat_check: Duration::ZERO,
            }),
            closed: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            loss_cause: Mutex::new(None),
            device_faults: AtomicU32::new(0),
            lost_after: config.lost_after,
            thread_slice: config.thread_slice,
            opened: Instant::now(),
            last_beat_ns: AtomicU64::new(0),
            counters: Counters::default(),
            route: std::sync::RwLock::new(None),
            trace: Mutex::new(()),
            senders: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&inner);
        host_side.serve(weak.clone());
        std::thread::Builder::new()
            .name("ringvisor-poller".into())
            .spawn(move || poll::poller(weak, config.host_threads()))
            .map_err(|e| DeviceError::InvalidConfig(format!("cannot spawn the poller thread: {e}")))?;
        let handles = Arc::new(LastHandle(Arc::downgrade(&inner)));
        Ok(Device { _handles: handles, inner })
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
}

impl DeviceInner {
    fn check_open(&self) -> Result<(), DeviceError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(if self.lost.load(Ordering::Acquire) { DeviceError::DeviceLost } else { DeviceError::Closed });
        }
        Ok(())
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A map keyed by the device's own ids (commands' and calls' correlation ids): unique, mostly sequential numbers
/// no one else chooses, so SipHash's guard against chosen keys buys nothing, and its cost was on every call's
/// path twice (the waiter's insert and removal).
type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// [`IdMap`]'s hash: one multiplication by the golden ratio's 64-bit constant (high bits well mixed, as
/// hashbrown's tags need).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Default)]
struct Counters {
    replies: AtomicU64,
    error_replies: AtomicU64,
    left_in_inbox: AtomicU64,
    in_flight: AtomicU64,
    events: AtomicU64,
    routed_out: AtomicU64,
    routed_in: AtomicU64,
    unroutable: AtomicU64,
}
