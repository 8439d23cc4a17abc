//! The CPU backend's workers, one pool shared by every CPU device of a process that has the same thread settings
//! (worker count, back-off, stuck-worker bound, latency mode, time slice).
//!
//! Why shared: each device had its own workers, so a process with two devices on a 2-core machine ran four
//! workers and two pollers. A call forwarded from an actor of one device to an actor of the other waited for
//! the other device's worker, parked since its last message, to be woken (about 10 µs here), while the worker
//! that had just run the first actor spun with nothing to do. A pool's worker sweeps every device of the pool,
//! so the worker that is awake runs whichever actor has work.
//!
//! A behaviour that never returns holds its worker. So that it cannot stop the pool's other devices, the
//! pool replaces a worker stuck in one step for `CpuConfig::stuck_after`: the devices' pollers look ([`Pool::tend`])
//! every few milliseconds, and the stuck worker leaves the pool when (if ever) its step returns.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cpu_placement;
use crate::error::DeviceError;
use crate::sync::lock;
use crate::wait::{HostThreads, IdleBackoff, Parker};

/// Empty sweeps an idle worker yields through, after its spinning ones, before it parks (as quick to find work
/// as spinning on an idle machine; its core given away on a busy one).
const WORKER_YIELD_ROUNDS: u32 = 64;

/// A pool moves at most one worker off a waiting host thread's CPU in this long ([`Pool::make_room_for_waiter`]): a
/// placement the move did not cure is not stirred again at every call.
const MOVE_AT_MOST_EVERY: Duration = Duration::from_millis(1);

/// A worker's CPU not recorded yet.
const CPU_UNKNOWN: u32 = u32::MAX;

/// A device's grid as the pool's workers see it (the CPU executor's `CpuShared`).
pub(super) trait PoolGrid: Send + Sync {
    /// One worker's pass over the grid. `rotation` varies where a worker starts.
    fn pass(&self, me: &WorkerState, rotation: usize) -> Pass;
    /// Up to `pauses` of an idle worker's spinning rounds spent watching `slot` (the one whose step replied last
    /// in this worker's passes): a call's next message usually goes to the slot that answered the last. The
    /// watcher runs the slot's step as soon as the host publishes to it, ahead of the run set's mark, which the
    /// host still sets: the mark is how the other workers, and this one's next pass, find the work (a watch is a
    /// quicker look, never the only one), and the step it leads to finds nothing more. Back to the passes at
    /// the first mark of another slot in the run set, or when `elsewhere` (the pool's other grids) finds work.
    /// A grid watched by another worker already returns at once.
    fn watch(&self, me: &WorkerState, slot: u32, pauses: u32, elsewhere: &dyn Fn() -> bool) -> Watch;
    /// Whether the grid has work marked (a worker about to park looks once more).
    fn has_marked_work(&self) -> bool;
    /// Set when the device shuts down: no worker starts a step of it ([`Pool::detach`]).
    fn terminating(&self) -> &AtomicBool;
}

type Grid = Arc<dyn PoolGrid>;

/// What a worker's pass over a grid did.
pub(super) struct Pass {
    /// A step made progress.
    pub(super) progress: bool,
    /// The last slot whose step replied (the one to watch).
    pub(super) replied: Option<u32>,
}

/// What a watch did ([`PoolGrid::watch`]).
#[derive(Default)]
pub(super) struct Watch {
    /// Pauses spent.
    pub(super) pauses: u32,
    /// A step made progress, or the run set has marks: the worker's next pass has work.
    pub(super) found_work: bool,
}

/// Most pauses of one watch: the worker's passes (block 0's step, the pool's other grids) come at least this
/// often (a few microseconds).
const WATCH_PAUSES: u32 = 256;

/// The address that identifies a grid.
fn address(grid: &Grid) -> usize {
    Arc::as_ptr(grid) as *const () as usize
}

/// What devices must share to share a pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct PoolKey {
    pub(super) workers: usize,
    pub(super) spin_sweeps: u32,
    pub(super) park_max: Duration,
    /// A worker in one step this long counts as stuck: a new worker takes its place.
    pub(super) stuck_after: Duration,
    /// The latency mode and the thread slice.
    pub(super) threads: HostThreads,
}

/// The pools of this process (a pool is dropped with the last device that uses it).
static POOLS: Mutex<Vec<Weak<Pool>>> = Mutex::new(Vec::new());

/// A pool of workers and the devices (grids) they run.
pub(super) struct Pool {
    inner: Arc<PoolInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What the pool's workers share.
pub(super) struct PoolInner {
    key: PoolKey,
    grids: RwLock<Vec<Grid>>,
    /// Moves whenever `grids` changes: a worker re-reads the list then.
    generation: AtomicU64,
    pub(super) parker: Parker,
    terminate: AtomicBool,
    /// The workers whose threads have not left, with their progress (looked at by `tend` and `detach`).
    workers: Mutex<Vec<Watched>>,
    next_index: AtomicU32,
    /// When a worker was last moved off a waiting caller's CPU.
    last_move: Mutex<Option<Instant>>,
}

/// A worker's progress, on a cache line of its own (no other worker's pass writes it); written by the worker
/// alone but for `replaced`, which `tend` sets.
#[repr(align(128))]
pub(super) struct WorkerState {
    /// Steps begun and ended: odd while the worker is in a step.
    steps: AtomicU64,
    /// The grid (its address) the worker is in a pass of; 0 between passes.
    in_grid: AtomicUsize,
    /// A replacement was started: leave once the current step returns.
    replaced: AtomicBool,
    /// The worker's thread has left.
    left: AtomicBool,
    /// The worker's thread id (0 until it started, or where the system has none), to move it by.
    tid: AtomicI32,
    /// The CPU the worker was last seen on after a yield, in the latency mode ([`CPU_UNKNOWN`] before).
    cpu: AtomicU32,
}

impl WorkerState {
    /// A worker not started yet.
    pub(super) fn new() -> Self {
        Self {
            steps: AtomicU64::new(0),
            in_grid: AtomicUsize::new(0),
            replaced: AtomicBool::new(false),
            left: AtomicBool::new(false),
            tid: AtomicI32::new(0),
            cpu: AtomicU32::new(CPU_UNKNOWN),
        }
    }

    /// Brackets one step (block 0's or an actor's) for the stuck-worker check.
    pub(super) fn step<R>(&self, f: impl FnOnce() -> R) -> R {
        // only this worker writes `steps`: a plain increment (no locked instruction on the step's path)
        self.steps.store(self.steps.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        let r = f();
        self.steps.store(self.steps.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        r
    }
}

/// A live worker's thread id and the CPU it was last seen on.
#[derive(Clone, Copy, Debug)]
struct Seen {
    tid: i32,
    cpu: u32,
}

/// The worker to move off a waiting caller's `cpu`: the first of `live`, if every one of them was last seen on
/// that CPU (a worker seen elsewhere, or not seen yet, may well take the call: nothing to cure) and its thread id
/// is known.
fn worker_to_move(mut live: impl Iterator<Item = Seen>, cpu: u32) -> Option<i32> {
    let first = live.next()?;
    (first.cpu == cpu && live.all(|w| w.cpu == cpu) && first.tid != 0).then_some(first.tid)
}

/// A worker as `tend` last saw it.
struct Watched {
    state: Arc<WorkerState>,
    seen: u64,
    since: Instant,
}

impl Pool {
    /// The pool for `key`, started if there is none yet.
    pub(super) fn for_key(key: PoolKey) -> Result<Arc<Pool>, DeviceError> {
        let mut pools = lock(&POOLS);
        pools.retain(|p| p.strong_count() > 0);
        if let Some(pool) = pools.iter().filter_map(Weak::upgrade).find(|p| p.inner.key == key) {
            return Ok(pool);
        }
        let pool = Arc::new(Pool {
            inner: Arc::new(PoolInner {
                key,
                grids: RwLock::new(Vec::new()),
                generation: AtomicU64::new(0),
                parker: Parker::new(),
                terminate: AtomicBool::new(false),
                workers: Mutex::new(Vec::new()),
                next_index: AtomicU32::new(0),
                last_move: Mutex::new(None),
            }),
            threads: Mutex::new(Vec::new()),
        });
        for _ in 0..key.workers {
            pool.spawn_worker()?;
        }
        tracing::debug!(workers = key.workers, "cpu worker pool started");
        pools.push(Arc::downgrade(&pool));
        Ok(pool)
    }

    pub(super) fn inner(&self) -> &PoolInner {
        &self.inner
    }

    fn spawn_worker(&self) -> Result<(), DeviceError> {
        let state = Arc::new(WorkerState::new());
        let index = self.inner.next_index.fetch_add(1, Ordering::Relaxed);
        let (inner, me) = (self.inner.clone(), state.clone());
        let handle = std::thread::Builder::new()
            .name(format!("ringvisor-cpu-{index}"))
            .spawn(move || {
                worker(&inner, &me, index as usize);
                me.left.store(true, Ordering::Release);
            })
            .map_err(|e| DeviceError::InvalidConfig(format!("cpu backend: cannot spawn worker: {e}")))?;
        lock(&self.inner.workers).push(Watched { state, seen: 0, since: Instant::now() });
        let mut threads = lock(&self.threads);
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
        Ok(())
    }

    /// Adds a device's grid to what the workers run.
    pub(super) fn attach(&self, grid: Grid) {
        self.inner.grids.write().unwrap_or_else(|e| e.into_inner()).push(grid);
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        self.inner.parker.wake();
    }

    /// Takes a device's grid out: no worker starts a step of it after this returns, and none is in one unless a
    /// step did not return by `deadline` (a behaviour that never returns: that worker is abandoned, and replaced).
    pub(super) fn detach(&self, grid: &Grid, deadline: Instant) {
        grid.terminating().store(true, Ordering::SeqCst);
        let address = address(grid);
        self.inner.grids.write().unwrap_or_else(|e| e.into_inner()).retain(|g| self::address(g) != address);
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        self.inner.parker.wake();
        // Dekker's pair with the worker's `in_grid` store and `terminate` load (SeqCst): either the worker sees
        // the grid ended, or this sees the worker in it
        let inside = || {
            lock(&self.inner.workers)
                .iter()
                .any(|w| !w.state.left.load(Ordering::Acquire) && w.state.in_grid.load(Ordering::SeqCst) == address)
        };
        while inside() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if inside() {
            tracing::error!(
                "a cpu worker did not leave a device's step (a behaviour that never returns?): abandoned, the \
                 device's memory kept for it, and a new worker started in its place"
            );
            self.tend_now(Duration::ZERO);
        }
    }

    /// Replaces each worker that has been in one step for the pool's `stuck_after` (called every few
    /// milliseconds by the pollers of the pool's devices).
    pub(super) fn tend(&self) {
        self.tend_now(self.inner.key.stuck_after);
    }

    fn tend_now(&self, stuck_after: Duration) {
        let now = Instant::now();
        let mut stuck = 0;
        {
            let mut workers = lock(&self.inner.workers);
            workers.retain(|w| !w.state.left.load(Ordering::Acquire));
            for w in workers.iter_mut().filter(|w| !w.state.replaced.load(Ordering::Relaxed)) {
                let steps = w.state.steps.load(Ordering::Relaxed);
                if steps != w.seen || steps % 2 == 0 {
                    (w.seen, w.since) = (steps, now);
                } else if now.duration_since(w.since) >= stuck_after {
                    w.state.replaced.store(true, Ordering::Relaxed);
                    stuck += 1;
                }
            }
        }
        for _ in 0..stuck {
            tracing::warn!(after = ?stuck_after, "a cpu worker is stuck in one step: starting another in its place");
            if let Err(e) = self.spawn_worker() {
                tracing::error!(error = %e, "cannot start a replacement cpu worker");
            }
        }
    }

    /// A host thread waiting on a device of this pool (a caller past its busy window, a producer for inbox room) is
    /// about to yield its CPU. In the latency mode, if every worker was last seen on that CPU (queued behind the
    /// waiting thread, which holds it, while the other CPUs are kept busy by threads that never park: the trap of
    /// [`crate::cpu_placement`]), one of them is moved off it; at most once per [`MOVE_AT_MOST_EVERY`]. Nothing in
    /// the default mode, whose idle threads park (a core that goes idle pulls work to it). Returns the thread id of
    /// the worker moved, if one was.
    pub(super) fn make_room_for_waiter(&self) -> Option<i32> {
        if !self.inner.key.threads.latency_mode {
            return None;
        }
        let cpu = cpu_placement::current_cpu()?;
        let mut last_move = self.inner.last_move.try_lock().ok()?;
        let now = Instant::now();
        if last_move.is_some_and(|at| now.duration_since(at) < MOVE_AT_MOST_EVERY) {
            return None;
        }
        let tid = {
            let workers = lock(&self.inner.workers);
            let live = workers
                .iter()
                .map(|w| &w.state)
                .filter(|s| !s.left.load(Ordering::Acquire) && !s.replaced.load(Ordering::Relaxed))
                .map(|s| Seen { tid: s.tid.load(Ordering::Relaxed), cpu: s.cpu.load(Ordering::Relaxed) });
            worker_to_move(live, cpu)?
        };
        *last_move = Some(now);
        if !cpu_placement::move_off_cpu(tid, cpu) {
            return None;
        }
        tracing::debug!(tid, cpu, "every cpu worker was queued on a waiting caller's CPU: moved one off it");
        Some(tid)
    }

    /// Devices in the pool.
    pub(super) fn devices(&self) -> usize {
        self.inner.grids.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.inner.terminate.store(true, Ordering::Release);
        self.inner.parker.wake();
        let threads = std::mem::take(&mut *lock(&self.threads));
        let deadline = Instant::now() + super::WORKER_EXIT_WAIT;
        for t in threads {
            super::join_executor_thread_by(t, deadline);
        }
    }
}

fn worker(pool: &PoolInner, me: &WorkerState, index: usize) {
    pool.key.threads.enter();
    let latency_mode = pool.key.threads.latency_mode;
    if latency_mode {
        me.tid.store(cpu_placement::current_thread_id().unwrap_or(0), Ordering::Relaxed);
    }
    let mut backoff = IdleBackoff::new(pool.key.spin_sweeps, pool.key.park_max)
        .yields(WORKER_YIELD_ROUNDS)
        .latency_mode(latency_mode);
    let mut grids: Vec<Grid> = Vec::new();
    let mut seen_generation = u64::MAX;
    let mut rotation = index;
    // the grid (its index in `grids`) and slot whose step replied last: what an idle spinning round watches
    let mut watched: Option<(usize, u32)> = None;
    while !pool.terminate.load(Ordering::Acquire) {
        let generation = pool.generation.load(Ordering::Acquire);
        if generation != seen_generation {
            grids = pool.grids.read().unwrap_or_else(|e| e.into_inner()).clone();
            seen_generation = generation;
            watched = None;
        }
        let seen = pool.parker.epoch();
        let mut progress = false;
        for (i, grid) in grids.iter().enumerate() {
            let pass = in_grid(me, grid, |grid| grid.pass(me, rotation));
            if let Some(pass) = pass {
                progress |= pass.progress;
                watched = pass.replied.map(|slot| (i, slot)).or(watched);
            }
            if me.replaced.load(Ordering::Relaxed) {
                return;
            }
        }
        rotation = rotation.wrapping_add(1);
        if !progress {
            progress = watch(me, &grids, watched, &mut backoff);
            if me.replaced.load(Ordering::Relaxed) {
                return;
            }
        }
        if progress {
            backoff.reset();
        } else {
            // a sender that marked a slot and saw no sleeper left its work for this check (see `mark_work`)
            backoff.idle_unless(&pool.parker, seen, || grids.iter().any(|g| g.has_marked_work()));
            if latency_mode && backoff.past_spinning() {
                // after a yield (the only idle round that may have moved it): where a waiting caller looks
                me.cpu.store(cpu_placement::current_cpu().unwrap_or(CPU_UNKNOWN), Ordering::Relaxed);
            }
        }
    }
}

/// Runs `f` on `grid` with the worker counted in it (`None` if the grid is shutting down).
fn in_grid<R>(me: &WorkerState, grid: &Grid, f: impl FnOnce(&Grid) -> R) -> Option<R> {
    // Dekker's pair with `detach` (SeqCst): either it sees this worker in the grid, or this sees it ended.
    me.in_grid.store(address(grid), Ordering::SeqCst);
    let out = (!grid.terminating().load(Ordering::SeqCst)).then(|| f(grid));
    me.in_grid.store(0, Ordering::Release);
    out
}

/// An idle worker's spinning rounds spent watching the slot that replied last (`watched`, [`PoolGrid::watch`]),
/// as many as its backoff has left to spin, at most [`WATCH_PAUSES`]; the pauses spent count as spun. Returns
/// whether it found work (false also when there was nothing to watch: the worker's ordinary idle round follows).
fn watch(me: &WorkerState, grids: &[Grid], watched: Option<(usize, u32)>, backoff: &mut IdleBackoff) -> bool {
    let Some((index, slot)) = watched.filter(|&(i, _)| i < grids.len()) else { return false };
    let pauses = backoff.spinning_pauses_left().min(WATCH_PAUSES);
    if pauses == 0 {
        return false;
    }
    let elsewhere = || grids.iter().enumerate().any(|(i, g)| i != index && g.has_marked_work());
    let watch = in_grid(me, &grids[index], |grid| grid.watch(me, slot, pauses, &elsewhere)).unwrap_or_default();
    backoff.spun_pauses(watch.pauses);
    watch.found_work
}

#[cfg(test)]
mod tests;
