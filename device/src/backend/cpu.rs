//! The CPU backend: a pool of host threads that run the device code's step functions for real.
//!
//! Slots are grouped (like the thread blocks of the CUDA build). Every worker sweeps every group and runs the
//! actor steps of each group it can claim, so a group is never run by two workers at once and a busy group is
//! never stuck behind a sleeping worker. Block 0 (`rv_supervisor_step`) is claimed the same way. There is no
//! barrier between workers: a stalled actor only stops its own progress.
//!
//! Idle workers back off: they spin, then yield, then park on a condition variable with a timeout that grows
//! to `park_max`; any host write wakes them. An idle device costs a wake-up per worker every `park_max`.

use super::{DirtySet, Executor, HostRegion};
use crate::error::DeviceError;
use crate::ffi::{self, BehaviourFn, RvGridView};
use crate::layout::*;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Settings of the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuConfig {
    /// Worker threads (default: available cores).
    pub workers: usize,
    /// Slots per group (the CPU analogue of a thread block).
    pub group_size: u32,
    /// Most messages an actor processes per step.
    pub budget: u32,
    /// Empty sweeps a worker spins through before it yields.
    pub spin_sweeps: u32,
    /// Longest park of an idle worker.
    pub park_max: Duration,
}

impl Default for CpuConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            group_size: 64,
            budget: 64,
            spin_sweeps: 64,
            park_max: Duration::from_millis(10),
        }
    }
}

/// Wakes parked threads without losing a wake-up that races with parking.
pub(crate) struct Parker {
    epoch: AtomicU64,
    sleepers: AtomicU32,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Self { epoch: AtomicU64::new(0), sleepers: AtomicU32::new(0), lock: Mutex::new(()), cond: Condvar::new() }
    }

    /// The current epoch; pass it to [`Parker::park`].
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Sleeps up to `timeout` unless [`Parker::wake`] was called since `seen` was read.
    pub(crate) fn park(&self, seen: u64, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.epoch.load(Ordering::SeqCst) == seen {
            let _ = self.cond.wait_timeout(guard, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn wake(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.cond.notify_all();
        }
    }
}

/// Adaptive backoff: spin, then yield, then park with a growing timeout.
pub(crate) struct Backoff {
    idle: u32,
    spin: u32,
    park_max: Duration,
}

impl Backoff {
    pub(crate) fn new(spin: u32, park_max: Duration) -> Self {
        Self { idle: 0, spin, park_max }
    }

    pub(crate) fn reset(&mut self) {
        self.idle = 0;
    }

    /// One idle round; `seen` is the parker epoch read before the round's work.
    pub(crate) fn idle(&mut self, parker: &Parker, seen: u64) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= self.spin {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        } else if self.idle <= self.spin * 2 {
            std::thread::yield_now();
        } else {
            let shift = (self.idle - self.spin * 2).min(16);
            let timeout = Duration::from_micros(50u64 << shift).min(self.park_max);
            parker.park(seen, timeout);
        }
    }
}

struct GridView(*mut RvGridView);
// SAFETY: the view is a read-only set of pointers after creation; the step functions synchronise all access
// to the regions it points at.
unsafe impl Send for GridView {}
// SAFETY: as above.
unsafe impl Sync for GridView {}

struct CpuShared {
    view: GridView,
    // The regions and the dispatch table must outlive every worker (dropped after `view`).
    _shared: HostRegion,
    _local: HostRegion,
    _table: Box<[Option<BehaviourFn>]>,
    supervisor_claim: AtomicU32,
    group_claims: Box<[AtomicU32]>,
    slot_count: u32,
    config: CpuConfig,
    terminate: AtomicBool,
    parker: Parker,
    dirty: DirtySet,
    host_wake: Arc<dyn Fn() + Send + Sync>,
}

impl Drop for CpuShared {
    fn drop(&mut self) {
        // SAFETY: created by rv_cpu_grid_new; no worker is running (they hold an Arc to self).
        unsafe { ffi::rv_cpu_grid_free(self.view.0) }
    }
}

/// The CPU executor: owns the regions and the worker threads.
pub(crate) struct CpuExecutor {
    shared: Arc<CpuShared>,
    shared_base: *mut u8,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

// SAFETY: `shared_base` points into a region owned by `shared`, used only through SharedGrid's protocol.
unsafe impl Send for CpuExecutor {}
// SAFETY: as above.
unsafe impl Sync for CpuExecutor {}

impl CpuExecutor {
    /// Allocates the regions for `header`, builds the view and starts the workers. `host_wake` is called when a
    /// step published events or replies.
    pub(crate) fn start(
        config: CpuConfig,
        header: RawGridHeader,
        table: Box<[Option<BehaviourFn>]>,
        host_wake: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Self, DeviceError> {
        if config.workers == 0 || config.group_size == 0 || config.budget == 0 {
            return Err(DeviceError::InvalidConfig("cpu backend: workers, group_size and budget must be > 0".into()));
        }
        let shared = HostRegion::zeroed(header.shared_bytes)?;
        let local = HostRegion::zeroed(header.local_bytes)?;
        // SAFETY: the region is at least shared_bytes >= sizeof(header) long and 4096-aligned.
        unsafe { std::ptr::write(shared.as_ptr() as *mut RawGridHeader, header) };
        // SAFETY: both regions are laid out for `header`, and `table` has RV_MAX_BEHAVIOURS entries; all three
        // outlive the view (fields of CpuShared).
        let view = unsafe { ffi::rv_cpu_grid_new(shared.as_ptr(), local.as_ptr(), table.as_ptr()) };
        if view.is_null() {
            return Err(DeviceError::InvalidConfig("cpu backend: the device rejected the grid header".into()));
        }
        let slot_count = header.slot_count;
        let groups = slot_count.div_ceil(config.group_size);
        let shared_base = shared.as_ptr();
        let inner = Arc::new(CpuShared {
            view: GridView(view),
            _shared: shared,
            _local: local,
            _table: table,
            supervisor_claim: AtomicU32::new(0),
            group_claims: (0..groups).map(|_| AtomicU32::new(0)).collect(),
            slot_count,
            config: config.clone(),
            terminate: AtomicBool::new(false),
            parker: Parker::new(),
            dirty: DirtySet::new(slot_count),
            host_wake,
        });
        let mut threads = Vec::with_capacity(config.workers);
        for w in 0..config.workers {
            let s = inner.clone();
            let handle = std::thread::Builder::new()
                .name(format!("ringvisor-cpu-{w}"))
                .spawn(move || worker(&s, w))
                .map_err(|e| DeviceError::InvalidConfig(format!("cpu backend: cannot spawn worker: {e}")))?;
            threads.push(handle);
        }
        tracing::debug!(workers = config.workers, groups, slot_count, "cpu backend started");
        Ok(Self { shared: inner, shared_base, threads: Mutex::new(threads) })
    }
}

fn claim(flag: &AtomicU32) -> bool {
    // SAFETY: AtomicU32 has the layout of u32; the C side only uses atomic operations on it.
    unsafe { ffi::rv_cpu_try_claim(flag.as_ptr()) != 0 }
}

fn release(flag: &AtomicU32) {
    // SAFETY: as for `claim`.
    unsafe { ffi::rv_cpu_release(flag.as_ptr()) }
}

fn worker(s: &CpuShared, index: usize) {
    let groups = s.group_claims.len();
    let mut backoff = Backoff::new(s.config.spin_sweeps, s.config.park_max);
    let mut start = index * groups / s.config.workers.max(1);
    let view = s.view.0 as *const RvGridView;
    while !s.terminate.load(Ordering::Acquire) {
        let seen = s.parker.epoch();
        let mut progress = 0u32;
        let mut publish = false;
        if claim(&s.supervisor_claim) {
            // SAFETY: the view is valid while `s` lives; the claim makes this the only block-0 runner.
            let r = unsafe { ffi::rv_supervisor_step(view) };
            release(&s.supervisor_claim);
            progress |= r;
            publish |= r & RV_STEP_REPLIED != 0;
        }
        for k in 0..groups {
            let g = (start + k) % groups;
            let flag = &s.group_claims[g];
            if !claim(flag) {
                continue;
            }
            let first = g as u32 * s.config.group_size;
            let last = (first + s.config.group_size).min(s.slot_count);
            for slot in first..last {
                // SAFETY: slot < slot_count; the group claim makes this the only runner of this slot.
                let r = unsafe { ffi::rv_actor_step(view, slot, s.config.budget) };
                if r & RV_STEP_REPLIED != 0 {
                    s.dirty.mark(slot);
                    publish = true;
                }
                progress |= r;
            }
            release(flag);
        }
        start = (start + 1) % groups.max(1);
        if publish {
            (s.host_wake)();
        }
        if progress & RV_STEP_PROGRESS != 0 {
            backoff.reset();
        } else {
            backoff.idle(&s.parker, seen);
        }
    }
}

impl Executor for CpuExecutor {
    fn shared_base(&self) -> *mut u8 {
        self.shared_base
    }

    fn wake(&self) {
        self.shared.parker.wake();
    }

    fn dirty_slots(&self) -> Option<&DirtySet> {
        Some(&self.shared.dirty)
    }

    fn shutdown(&self) {
        self.shared.terminate.store(true, Ordering::Release);
        self.shared.parker.wake();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "cpu ({} workers, {} slots per group, budget {})",
            self.shared.config.workers, self.shared.config.group_size, self.shared.config.budget
        )
    }
}

impl Drop for CpuExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}
