//! The CPU backend: a pool of host threads that run the device code's step functions for real.
//!
//! Workers run only slots that have work, found through the device code's *run set* (`rv_mark_work`): a bit
//! per slot, set by whoever gives the slot work (the host's messages and faults, block 0's commands and
//! requests, another actor's kernel-to-kernel send) and by a step that left work behind, and a summary bit per
//! word of 32 slots. A pass of a worker steps block 0, then the words the summary marks. A worker takes one
//! slot's mark at a time (the word's other marks stay in the run set), and each slot's step runs on one worker
//! at a time (a slot's lock), so a slot is never run by two workers at once, and a worker stuck in a behaviour
//! that never returns holds that one slot: the other slots of its word run on the other workers. An idle actor
//! costs nothing: the cost of a pass grows with the slots that have work, not with the slots that exist. There
//! is no barrier between workers: a stalled actor only stops its own progress.
//!
//! Idle workers back off: they spin, then yield, then park on a condition variable with a timeout that grows
//! to `park_max`; any host write wakes them. A worker's spinning rounds watch the slot that answered last
//! (`CpuShared::watch`): its next message is stepped as soon as the host publishes it, before the run-set mark
//! that follows could reach the worker. An idle device costs a wake-up per worker every `park_max`. The
//! workers are a pool shared by the process's CPU devices of the same settings (`cpu_pool/`).

use super::cpu_pool::{Pass, Pool, PoolGrid, PoolKey, Watch, WorkerState};
use super::dirty_set::DirtySet;
use super::region::HostRegion;
use super::{Executor, HostSide};
use crate::error::DeviceError;
use crate::ffi::{self, BehaviourFn, RvGridView};
use crate::layout::*;
use crate::sync::OwnLine;
use crate::wait::HostThreads;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Settings of the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuConfig {
    /// Worker threads (default: available cores), shared with the process's other CPU devices that have the
    /// same worker count, back-off, stuck-worker bound, latency mode and thread slice (one pool runs them all).
    pub workers: usize,
    /// Most messages an actor processes per step.
    pub budget: u32,
    /// Empty sweeps a worker spins through before it yields (default 32: a few microseconds; a worker that
    /// spins longer keeps a core from the threads that give it work when the machine's cores are busy).
    pub spin_sweeps: u32,
    /// Longest park of an idle worker.
    pub park_max: Duration,
    /// How long a worker may stay in one step of one actor before the pool counts it stuck (a behaviour that
    /// never returns) and starts a new worker in its place; the stuck one leaves when (if ever) its step returns.
    /// Default 200 ms; at least 1 ms. A behaviour whose steps rightly run longer (a heavy computation per
    /// message) wants a longer bound, or each such step costs a thread start.
    pub stuck_after: Duration,
}

impl Default for CpuConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            budget: 64,
            spin_sweeps: 32,
            park_max: Duration::from_millis(10),
            stuck_after: Duration::from_millis(200),
        }
    }
}

struct GridView(*mut RvGridView);
// SAFETY: the view is a read-only set of pointers after creation; the step functions synchronise all access
// to the regions it points at.
unsafe impl Send for GridView {}
// SAFETY: as above.
unsafe impl Sync for GridView {}

/// One device's grid as the pool's workers run it.
struct CpuShared {
    view: GridView,
    // The regions and the dispatch table must outlive every worker (dropped after `view`).
    _shared: HostRegion,
    _local: HostRegion,
    _table: Box<[Option<BehaviourFn>]>,
    /// Taken by every worker's pass: on lines of its own, off those of the fields the senders read (`view`).
    keeper_lock: OwnLine<AtomicU32>,
    /// One lock per slot, held while its step runs (a behaviour that never returns holds its slot alone), and
    /// the marks left for a slot's holder (see `rv_cpu_run_slot`).
    slot_locks: Box<[AtomicU32]>,
    slot_pending: Box<[AtomicU32]>,
    /// A worker watches a slot of this grid ([`PoolGrid::watch`]): one at a time. Let go while the watcher runs a
    /// step, so that one stuck in a behaviour that never returns does not keep the grid from being watched.
    watcher: OwnLine<AtomicBool>,
    slot_count: u32,
    summary_words: u32,
    config: CpuConfig,
    /// The device is shutting down: no worker starts a step of it ([`Pool::detach`]).
    terminate: AtomicBool,
    dirty: DirtySet,
    host_side: Arc<dyn HostSide>,
}

impl Drop for CpuShared {
    fn drop(&mut self) {
        // SAFETY: created by rv_cpu_grid_new; no worker is running (they hold an Arc to self).
        unsafe { ffi::rv_cpu_grid_free(self.view.0) }
    }
}

/// The CPU executor: owns the regions; the pool's workers run them.
pub(crate) struct CpuExecutor {
    shared: Arc<CpuShared>,
    shared_base: *mut u8,
    pool: Arc<Pool>,
}

// SAFETY: `shared_base` points into a region owned by `shared`, used only through SharedGrid's protocol.
unsafe impl Send for CpuExecutor {}
// SAFETY: as above.
unsafe impl Sync for CpuExecutor {}

impl CpuExecutor {
    /// Allocates the regions for `header`, builds the view and hands it to the pool of workers for `config` and
    /// `threads` (started if there is none). `host_side` is told when a step published events or replies.
    pub(crate) fn start(
        config: CpuConfig,
        header: RawGridHeader,
        table: Box<[Option<BehaviourFn>]>,
        host_side: Arc<dyn HostSide>,
        threads: HostThreads,
    ) -> Result<Self, DeviceError> {
        if config.workers == 0 || config.budget == 0 {
            return Err(DeviceError::InvalidConfig("cpu backend: workers and budget must be > 0".into()));
        }
        if config.stuck_after < Duration::from_millis(1) {
            return Err(DeviceError::InvalidConfig(format!(
                "cpu backend: stuck_after must be at least 1 ms (got {:?})",
                config.stuck_after
            )));
        }
        let inner = Arc::new(CpuShared::new(&config, header, table, host_side)?);
        let shared_base = inner._shared.as_ptr();
        let pool = Pool::for_key(PoolKey {
            workers: config.workers,
            spin_sweeps: config.spin_sweeps,
            park_max: config.park_max,
            stuck_after: config.stuck_after,
            threads,
        })?;
        pool.attach(inner.clone());
        tracing::debug!(
            workers = config.workers,
            slot_count = inner.slot_count,
            devices = pool.devices(),
            "cpu backend started"
        );
        Ok(Self { shared: inner, shared_base, pool })
    }
}

fn try_lock(flag: &AtomicU32) -> bool {
    // SAFETY: AtomicU32 has the layout of u32; the C side only uses atomic operations on it.
    unsafe { ffi::rv_cpu_try_lock(flag.as_ptr()) != 0 }
}

fn release(flag: &AtomicU32) {
    // SAFETY: as for `try_lock`.
    unsafe { ffi::rv_cpu_release(flag.as_ptr()) }
}

/// Slots per run-set word.
const SLOTS_PER_WORD: u32 = 32;
/// A watching worker looks at the run set once every this many rounds ([`PoolGrid::watch`]).
const WATCH_MARKS_EVERY: u32 = 4;
/// Run-set words per summary word (a bit each).
const WORDS_PER_SUMMARY_WORD: u32 = 32;

impl CpuShared {
    /// Allocates the regions for `header` and builds the view over them, every slot marked in its run set.
    fn new(
        config: &CpuConfig,
        header: RawGridHeader,
        table: Box<[Option<BehaviourFn>]>,
        host_side: Arc<dyn HostSide>,
    ) -> Result<Self, DeviceError> {
        let shared = HostRegion::zeroed(header.shared_bytes)?;
        shared.dense(0, header.off_inboxes);
        let local = HostRegion::zeroed(header.local_bytes)?;
        local.dense(0, header.off_k2k_bulk);
        // SAFETY: the region is at least shared_bytes >= sizeof(header) long and 4096-aligned.
        unsafe { std::ptr::write(shared.as_ptr() as *mut RawGridHeader, header) };
        // SAFETY: both regions are laid out for `header`, and `table` has RV_MAX_BEHAVIOURS entries; all three
        // outlive the view (fields of CpuShared).
        let view = unsafe { ffi::rv_cpu_grid_new(shared.as_ptr(), local.as_ptr(), table.as_ptr()) };
        if view.is_null() {
            return Err(DeviceError::InvalidConfig("cpu backend: the device rejected the grid header".into()));
        }
        let slot_count = header.slot_count;
        // SAFETY: `view` was just created and is valid.
        let summary_words = unsafe { ffi::rv_cpu_summary_words(view) };
        Ok(CpuShared {
            view: GridView(view),
            _shared: shared,
            _local: local,
            _table: table,
            keeper_lock: OwnLine(AtomicU32::new(0)),
            slot_locks: (0..slot_count).map(|_| AtomicU32::new(0)).collect(),
            slot_pending: (0..slot_count).map(|_| AtomicU32::new(0)).collect(),
            watcher: OwnLine(AtomicBool::new(false)),
            slot_count,
            summary_words,
            config: config.clone(),
            terminate: AtomicBool::new(false),
            dirty: DirtySet::new(slot_count),
            host_side,
        })
    }

    /// Runs `slot`'s step (`rv_cpu_run_slot`: unless another worker runs it now), as the step of `me`. Returns the
    /// step's result (a step that replied is the caller's to mark in the dirty set).
    fn run_slot(&self, me: &WorkerState, slot: u32) -> u32 {
        let view = self.view.0 as *const RvGridView;
        // SAFETY: `slot` < slot_count (a marked bit of this grid's run set, or the watched slot, checked by `watch`);
        // both arrays have slot_count atomic words, used by the C side only atomically; the slot's lock
        // makes this the only runner of its step.
        me.step(|| unsafe {
            ffi::rv_cpu_run_slot(
                view,
                slot,
                self.config.budget,
                self.slot_locks.as_ptr() as *mut u32,
                self.slot_pending.as_ptr() as *mut u32,
            )
        })
    }

    /// Runs `step` with the grid's watch let go (a step may never return: the grid can be watched meanwhile),
    /// then takes the watch back: `None` if another worker took it first.
    fn unwatched(&self, step: impl FnOnce() -> bool) -> Option<bool> {
        self.watcher.store(false, Ordering::Release);
        let progress = step();
        (!self.watcher.swap(true, Ordering::Acquire)).then_some(progress)
    }

    /// Runs `slot`'s step for a watch ([`PoolGrid::watch`]), telling the host's reader if it replied; whether it
    /// made progress.
    fn watch_step(&self, me: &WorkerState, slot: u32) -> bool {
        let r = self.run_slot(me, slot);
        if r & RV_STEP_REPLIED != 0 {
            self.dirty.mark_word(slot - slot % SLOTS_PER_WORD, 1 << (slot % SLOTS_PER_WORD));
            self.host_side.published();
        }
        r & RV_STEP_PROGRESS != 0
    }

    /// Takes the mark of `slot`, or of the next marked slot above it in its run-set word, and runs that slot's
    /// step for a watch; whether it made progress.
    fn take_and_run(&self, me: &WorkerState, slot: u32) -> bool {
        let word = slot / SLOTS_PER_WORD;
        // SAFETY: `word` is a run-set word of this grid (`slot` < slot_count).
        let b = unsafe { ffi::rv_cpu_take_one_marked(self.view.0, word, slot % SLOTS_PER_WORD) };
        b < SLOTS_PER_WORD && self.watch_step(me, word * SLOTS_PER_WORD + b)
    }
}

impl PoolGrid for CpuShared {
    /// One worker's pass over this grid: block 0's step (if no other worker is running it), then each slot the
    /// run set marks. `rotation` varies where in the run set a worker starts.
    fn pass(&self, me: &WorkerState, rotation: usize) -> Pass {
        let summary_words = self.summary_words as usize;
        let view = self.view.0 as *const RvGridView;
        let mut progress = 0u32;
        let mut replied = None;
        let mut events = false;
        if try_lock(&self.keeper_lock) {
            // SAFETY: the view is valid while `self` lives; the lock makes this the only block-0 runner.
            let r = me.step(|| unsafe { ffi::rv_keeper_step(view) });
            release(&self.keeper_lock);
            events = r & RV_STEP_REPLIED != 0;
            progress |= r;
        }
        let start = rotation % summary_words.max(1);
        for k in 0..summary_words {
            let i = (start + k) % summary_words;
            // SAFETY: i < summary_words.
            let mut marked = unsafe { ffi::rv_cpu_summary(view, i as u32) };
            while marked != 0 {
                let word = i as u32 * WORDS_PER_SUMMARY_WORD + marked.trailing_zeros();
                marked &= marked - 1;
                // One mark at a time, the others left in the run set: a step that never returns (a behaviour's
                // endless loop) strands no other slot of the word. Upwards through the word, each slot at most
                // once per visit, so a slot that keeps marking itself (a stalled actor) starves none above it.
                let mut word_replied = 0u32;
                let mut from = 0;
                while from < SLOTS_PER_WORD {
                    // SAFETY: `word` is a run-set word of this grid (marked in the summary).
                    let b = unsafe { ffi::rv_cpu_take_one_marked(view, word, from) };
                    if b >= SLOTS_PER_WORD {
                        break;
                    }
                    from = b + 1;
                    let slot = word * SLOTS_PER_WORD + b;
                    let r = self.run_slot(me, slot);
                    if r & RV_STEP_REPLIED != 0 {
                        word_replied |= 1 << b;
                        replied = Some(slot);
                    }
                    progress |= r;
                }
                if word_replied != 0 {
                    self.dirty.mark_word(word * SLOTS_PER_WORD, word_replied);
                }
            }
        }
        if events {
            // read here, with the replies of this pass, if no one else is reading the device: a failure's notice
            // then reaches its supervisor without a hop through the poller thread
            // (counted as a step: a subscriber's hook that blocks, against its contract, holds this worker alone,
            // and the pool starts another in its place)
            me.step(|| self.host_side.events_published());
        } else if progress & RV_STEP_REPLIED != 0 {
            self.host_side.published();
        }
        Pass { progress: progress & RV_STEP_PROGRESS != 0, replied }
    }

    /// Spinning rounds spent on `slot`, the one that replied last ([`PoolGrid::watch`]): in each, the lines of the
    /// cell its next message will fill asked for (`rv_cpu_prefetch_watched`), one pause and a load of the slot's
    /// `host_seq`, and the slot's step as soon as it moved (the cell asked for again first); every
    /// [`WATCH_MARKS_EVERY`] rounds a look at the run set (the slot's own mark taken and run; back to the passes at
    /// another slot's, or at work in `elsewhere`). One watcher per grid.
    fn watch(&self, me: &WorkerState, slot: u32, pauses: u32, elsewhere: &dyn Fn() -> bool) -> Watch {
        if slot >= self.slot_count || self.watcher.swap(true, Ordering::Acquire) {
            return Watch::default();
        }
        let view = self.view.0 as *const RvGridView;
        // SAFETY: the view is valid while `self` lives; the C side checks the slot.
        let host_seq = || unsafe { ffi::rv_cpu_host_seq(view, slot) };
        let mut seen = host_seq();
        let mut watch = Watch::default();
        while watch.pauses < pauses {
            // the cell the next message will fill, asked for in every round: once the host has written it, its
            // lines travel with host_seq's, not after them (3-12 ns of a latency-mode call, 29-143 ns while the
            // VM's vCPUs sit far apart: docs/benchmarks.md, session 26)
            // SAFETY: as for `host_seq`.
            unsafe { ffi::rv_cpu_prefetch_watched(view, slot) };
            std::hint::spin_loop();
            watch.pauses += 1;
            let now = host_seq();
            if now != seen {
                // the message's cell asked for now, so that it travels while the step begins
                // SAFETY: as for `host_seq`.
                unsafe { ffi::rv_cpu_prefetch_watched(view, slot) };
                seen = now;
                match self.unwatched(|| self.watch_step(me, slot)) {
                    Some(progress) => watch.found_work |= progress,
                    None => return watch, // another worker watches now
                }
            }
            if watch.pauses % WATCH_MARKS_EVERY == 0 {
                // SAFETY: as for `host_seq`.
                match unsafe { ffi::rv_cpu_watch_marks(view, slot) } {
                    0 => {}
                    // its own mark (a sender's, for a message whose step ran already, or the device's): taken and
                    // run here, so that no other worker steps the slot for it
                    1 => match self.unwatched(|| self.take_and_run(me, slot)) {
                        Some(progress) => watch.found_work |= progress,
                        None => return watch,
                    },
                    _ => {
                        watch.found_work = true;
                        break;
                    }
                }
                if elsewhere() {
                    watch.found_work = true;
                    break;
                }
                if self.terminate.load(Ordering::Relaxed) {
                    break;
                }
            }
        }
        self.watcher.store(false, Ordering::Release);
        watch
    }

    /// Whether the run set marks any slot (a worker about to park looks once more).
    fn has_marked_work(&self) -> bool {
        // SAFETY: i < summary_words; the view is valid while `self` lives.
        (0..self.summary_words).any(|i| unsafe { ffi::rv_cpu_summary(self.view.0, i) } != 0)
    }

    fn terminating(&self) -> &AtomicBool {
        &self.terminate
    }
}

impl Executor for CpuExecutor {
    fn shared_base(&self) -> *mut u8 {
        self.shared_base
    }

    fn wake(&self) {
        self.pool.inner().parker.wake();
    }

    fn outbox_read(&self) {
        // Nothing waits for outbox room here: an actor that found none (a stalled step) leaves its slot marked in
        // the run set (rv_cpu_run_slot marks again a step that did not end quiet), so no worker parks while one
        // waits, and block 0 leaves what does not fit queued. (The wake-up was a read-modify-write of the line
        // every idle worker reads, on the path of each reply.)
    }

    fn mark_work(&self, slot: u32) {
        // SAFETY: the view is valid while the executor lives; the C side checks the slot.
        let marked = unsafe { ffi::rv_cpu_mark_work(self.shared.view.0, slot) } != 0;
        // A slot already marked was marked by a sender that woke the workers, or by a running worker. A parked
        // worker re-checks the run set after it counts as a sleeper (see the worker's `idle_unless`), so no
        // shared write is needed unless one sleeps.
        if marked {
            // the marks are sequentially consistent read-modify-writes (rv_cpu_mark_work)
            self.pool.inner().parker.wake_sleepers_after_seq_cst_mark();
        }
    }

    fn dirty_slots(&self, mark: &mut dyn FnMut(u32)) -> bool {
        self.shared.dirty.drain(mark);
        true
    }

    fn shutdown(&self) {
        if self.shared.terminate.load(Ordering::SeqCst) {
            return;
        }
        // A worker stuck in a behaviour is abandoned after the wait: it holds an Arc of the regions it uses.
        let grid: Arc<dyn PoolGrid> = self.shared.clone();
        self.pool.detach(&grid, std::time::Instant::now() + super::WORKER_EXIT_WAIT);
    }

    fn tend(&self) {
        self.pool.tend();
    }

    fn host_waiter_yields(&self) {
        let _ = self.pool.make_room_for_waiter();
    }

    fn describe(&self) -> String {
        format!(
            "cpu ({} workers shared by {} device(s), run set of {} slots per word, budget {})",
            self.shared.config.workers,
            self.pool.devices(),
            SLOTS_PER_WORD,
            self.shared.config.budget
        )
    }
}

impl Drop for CpuExecutor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests;
