//! How a device is sized and which executor runs it.

use std::time::Duration;

use crate::backend::Backend;
use crate::behaviour::BehaviourSet;
use crate::layout::RawGridParams;
use crate::wait::HostThreads;

pub const DEFAULT_LOST_AFTER: Duration = Duration::from_secs(3);

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
    /// Bytes of each of a slot's three bulk areas (host to actor, actor to host, actor to actor), where
    /// payloads over [`PAYLOAD_BYTES`](crate::PAYLOAD_BYTES) travel: the largest message is this size. 0 (the
    /// default) = every message fits one envelope; otherwise a power of two from 256 to 16 MiB. Costs three
    /// times this per slot (64 slots with 64 KiB: 12 MiB).
    pub bulk_bytes: u32,
    /// The behaviours the device knows.
    pub behaviours: BehaviourSet,
    /// The executor.
    pub backend: Backend,
    /// How long a command waits for room in the command ring.
    pub command_timeout: Duration,
    /// Block 0's heartbeat stale this long = the device is lost (see
    /// [`Device::health`](crate::Device::health)); `None`: never declared lost.
    pub lost_after: Option<Duration>,
    /// The latency mode: the host threads that wait on the device (the CPU backend's workers, the poller)
    /// never sleep when idle; they spin, then yield. Work that arrives costs no wake-up of a sleeping thread
    /// (tens of microseconds on a busy machine), at the price of those threads keeping cores busy. While most
    /// of a thread's recent yields come back late (the cores are busy with threads that do not yield), it sleeps
    /// as without the mode for 10 ms at a time, so that it does not hold back the threads the work needs. Off
    /// by default.
    pub latency_mode: bool,
    /// The time slice the device's own host threads (the CPU backend's workers, the poller, the WebGPU
    /// executor) ask of the kernel's scheduler ([`request_thread_slice`](crate::request_thread_slice)): short, so
    /// that a thread woken with work runs at once on a machine whose cores are busy, instead of after a busy
    /// thread's slice (3-4 ms on Linux). A caller's thread that yields while it waits for this device's answer
    /// runs with the same slice until its wait ends (its own given back), so it is not left behind the device's
    /// threads yielding on its core. Default [`DEFAULT_THREAD_SLICE`](crate::DEFAULT_THREAD_SLICE); `None`: the
    /// system's default, and nothing lent.
    pub thread_slice: Option<Duration>,
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
            bulk_bytes: 0,
            behaviours: BehaviourSet::builtins(),
            backend: Backend::default(),
            command_timeout: Duration::from_secs(5),
            lost_after: Some(DEFAULT_LOST_AFTER),
            latency_mode: false,
            thread_slice: Some(crate::thread_slice::DEFAULT_THREAD_SLICE),
        }
    }
}

impl DeviceConfig {
    /// A preset for large fleets (tens of thousands of small actors): 8-envelope inboxes and outboxes, a
    /// 4-envelope kernel-to-kernel inbox and 256 bytes of state, about 2.8 KiB of device memory per slot
    /// (100,000 slots: about 280 MB; the default sizes take about 19 KiB per slot), and command and event
    /// rings of 16,384 records (2 MiB and 1 MiB), so that a tree starting tens of thousands of children
    /// submits its creates without waiting for room. Set the slots with [`DeviceConfig::slots`].
    pub fn compact() -> Self {
        Self {
            inbox_capacity: 8,
            outbox_capacity: 8,
            k2k_capacity: 4,
            state_bytes: 256,
            command_capacity: 16 * 1024,
            event_capacity: 16 * 1024,
            ..Self::default()
        }
    }

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
    /// Sets the command ring's capacity (a power of two): how many creates, kills and restarts may wait for
    /// block 0 before a submitter waits for room.
    pub fn command_capacity(mut self, n: u32) -> Self {
        self.command_capacity = n;
        self
    }
    /// Sets the event ring's capacity (a power of two): how many events block 0 may post before the host
    /// drains them.
    pub fn event_capacity(mut self, n: u32) -> Self {
        self.event_capacity = n;
        self
    }
    /// Sets the state bytes per actor.
    pub fn state_bytes(mut self, n: u32) -> Self {
        self.state_bytes = n;
        self
    }
    /// Sets the size of each bulk area, the largest message (see
    /// [`DeviceConfig::bulk_bytes`](#structfield.bulk_bytes)); rounded up to a power of two, at least 256.
    pub fn bulk_bytes(mut self, n: u32) -> Self {
        self.bulk_bytes = if n == 0 { 0 } else { n.max(256).checked_next_power_of_two().unwrap_or(u32::MAX) };
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

    /// Turns the latency mode on or off (see [`DeviceConfig::latency_mode`](#structfield.latency_mode)).
    pub fn latency_mode(mut self, on: bool) -> Self {
        self.latency_mode = on;
        self
    }

    /// Sets the time slice the device's own threads ask for (see
    /// [`DeviceConfig::thread_slice`](#structfield.thread_slice)); `None` leaves them at the system's default.
    pub fn thread_slice(mut self, slice: Option<Duration>) -> Self {
        self.thread_slice = slice;
        self
    }

    /// How the device's own host threads wait and are scheduled.
    pub(super) fn host_threads(&self) -> HostThreads {
        HostThreads { latency_mode: self.latency_mode, slice: self.thread_slice }
    }

    pub(super) fn params(&self) -> RawGridParams {
        RawGridParams {
            slot_count: self.slots,
            inbox_capacity: self.inbox_capacity,
            outbox_capacity: self.outbox_capacity,
            k2k_capacity: self.k2k_capacity,
            command_capacity: self.command_capacity,
            event_capacity: self.event_capacity,
            state_bytes: self.state_bytes,
            bulk_bytes: self.bulk_bytes,
        }
    }
}
