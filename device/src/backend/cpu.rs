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
//! to `park_max`; any host write wakes them. An idle device costs a wake-up per worker every `park_max`. The
//! workers are a pool shared by the process's CPU devices of the same settings (`cpu_pool.rs`).

use super::cpu_pool::{Pool, PoolGrid, PoolKey, WorkerState};
use super::dirty_set::DirtySet;
use super::region::HostRegion;
use super::Executor;
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
    summary_words: u32,
    config: CpuConfig,
    /// The device is shutting down: no worker starts a step of it ([`Pool::detach`]).
    terminate: AtomicBool,
    dirty: DirtySet,
    host_wake: Arc<dyn Fn() + Send + Sync>,
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
    /// `threads` (started if there is none). `host_wake` is called when a step published events or replies.
    pub(crate) fn start(
        config: CpuConfig,
        header: RawGridHeader,
        table: Box<[Option<BehaviourFn>]>,
        host_wake: Arc<dyn Fn() + Send + Sync>,
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
        let shared_base = shared.as_ptr();
        let inner = Arc::new(CpuShared {
            view: GridView(view),
            _shared: shared,
            _local: local,
            _table: table,
            keeper_lock: OwnLine(AtomicU32::new(0)),
            slot_locks: (0..slot_count).map(|_| AtomicU32::new(0)).collect(),
            slot_pending: (0..slot_count).map(|_| AtomicU32::new(0)).collect(),
            summary_words,
            config: config.clone(),
            terminate: AtomicBool::new(false),
            dirty: DirtySet::new(slot_count),
            host_wake,
        });
        let pool = Pool::for_key(PoolKey {
            workers: config.workers,
            spin_sweeps: config.spin_sweeps,
            park_max: config.park_max,
            stuck_after: config.stuck_after,
            threads,
        })?;
        pool.attach(inner.clone());
        tracing::debug!(workers = config.workers, slot_count, devices = pool.devices(), "cpu backend started");
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
/// Run-set words per summary word (a bit each).
const WORDS_PER_SUMMARY_WORD: u32 = 32;

impl PoolGrid for CpuShared {
    /// One worker's pass over this grid: block 0's step (if no other worker is running it), then each slot the
    /// run set marks. `rotation` varies where in the run set a worker starts.
    fn pass(&self, me: &WorkerState, rotation: usize) -> bool {
        let summary_words = self.summary_words as usize;
        let view = self.view.0 as *const RvGridView;
        let mut progress = 0u32;
        let mut publish = false;
        if try_lock(&self.keeper_lock) {
            // SAFETY: the view is valid while `self` lives; the lock makes this the only block-0 runner.
            let r = me.step(|| unsafe { ffi::rv_keeper_step(view) });
            release(&self.keeper_lock);
            progress |= r;
            publish |= r & RV_STEP_REPLIED != 0;
        }
        let start = rotation % summary_words.max(1);
        for k in 0..summary_words {
            let i = (start + k) % summary_words;
            // SAFETY: i < summary_words.
            let mut marked = unsafe { ffi::rv_cpu_summary(view, i as u32) };
            while marked != 0 {
                let word = i as u32 * WORDS_PER_SUMMARY_WORD + marked.trailing_zeros();
                marked &= marked - 1;
                let mut replied = 0u32;
                // One mark at a time, the others left in the run set: a step that never returns (a behaviour's
                // endless loop) strands no other slot of the word. Upwards through the word, each slot at most
                // once per visit, so a slot that keeps marking itself (a stalled actor) starves none above it.
                let mut from = 0;
                while from < SLOTS_PER_WORD {
                    // SAFETY: `word` is a run-set word of this grid (marked in the summary).
                    let b = unsafe { ffi::rv_cpu_take_one_marked(view, word, from) };
                    if b >= SLOTS_PER_WORD {
                        break;
                    }
                    from = b + 1;
                    let slot = word * SLOTS_PER_WORD + b;
                    // SAFETY: `slot` < slot_count (a marked bit of this grid's run set); both arrays have
                    // slot_count atomic words, used by the C side only atomically; the slot's lock makes this
                    // the only runner of its step.
                    let r = me.step(|| unsafe {
                        ffi::rv_cpu_run_slot(
                            view,
                            slot,
                            self.config.budget,
                            self.slot_locks.as_ptr() as *mut u32,
                            self.slot_pending.as_ptr() as *mut u32,
                        )
                    });
                    if r & RV_STEP_REPLIED != 0 {
                        replied |= 1 << b;
                    }
                    progress |= r;
                }
                if replied != 0 {
                    self.dirty.mark_word(word * SLOTS_PER_WORD, replied);
                    publish = true;
                }
            }
        }
        if publish {
            (self.host_wake)();
        }
        progress & RV_STEP_PROGRESS != 0
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
mod tests {
    use super::*;
    use crate::behaviour::BehaviourSet;
    use crate::shared::SharedGrid;

    /// The host build of the protocol over fresh regions, with no worker: the test steps block 0 itself.
    struct HandStepped {
        view: *mut RvGridView,
        grid: SharedGrid,
        _regions: (HostRegion, HostRegion),
        _table: Box<[Option<BehaviourFn>]>,
    }

    impl HandStepped {
        fn new(slots: u32) -> Self {
            let params = RawGridParams {
                slot_count: slots,
                inbox_capacity: 4,
                outbox_capacity: 4,
                k2k_capacity: 2,
                command_capacity: 4096,
                event_capacity: 4096,
                state_bytes: 64,
                bulk_bytes: 0,
            };
            let header = super::super::compute_layout(&params).unwrap();
            let shared = HostRegion::zeroed(header.shared_bytes).unwrap();
            let local = HostRegion::zeroed(header.local_bytes).unwrap();
            let table = BehaviourSet::builtins().host_table();
            // SAFETY: the region is at least as large as the header and page aligned.
            unsafe { std::ptr::write(shared.as_ptr() as *mut RawGridHeader, header) };
            // SAFETY: the regions are laid out for `header`; they and the table outlive the view (fields of Self).
            let view = unsafe { ffi::rv_cpu_grid_new(shared.as_ptr(), local.as_ptr(), table.as_ptr()) };
            assert!(!view.is_null());
            // SAFETY: the header was written above; the region lives as long as `grid` (both in Self).
            let grid = unsafe { SharedGrid::new(shared.as_ptr()) };
            Self { view, grid, _regions: (shared, local), _table: table }
        }

        fn step_block0(&self) {
            // SAFETY: the view is valid and no other thread runs block 0.
            unsafe { ffi::rv_keeper_step(self.view) };
        }

        fn step_actor(&self, slot: u32) -> u32 {
            // SAFETY: the view is valid and no other thread runs this slot.
            unsafe { ffi::rv_actor_step(self.view, slot, 64) }
        }

        fn create(&self, index: u32, slot: u32, behaviour: u32) {
            self.command(index, RV_OP_CREATE, slot, behaviour);
        }

        fn command(&self, index: u32, op: u32, slot: u32, behaviour: u32) {
            let cmd = RawCommand {
                op,
                slot,
                expected_generation: 0,
                behaviour,
                cmd_id: u64::from(index) + 1,
                inbox_index: 0,
                init_len: 0,
                init: [0; RV_INIT_BYTES as usize],
            };
            self.grid.write_command(index, &cmd);
        }
    }

    impl HandStepped {
        /// Two slots, an echo actor created in slot 0 and stepped until it is settled (Active and idle).
        fn with_settled_echo() -> Self {
            let d = HandStepped::new(2);
            d.create(0, 0, 1); // echo
            d.grid.publish_command_tail(1);
            d.step_block0();
            d.step_actor(0); // the init
            d.step_block0(); // the Created event
            for _ in 0..4 {
                d.step_actor(0); // the first full steps settle the slot
            }
            d
        }
    }

    /// The calling thread's shared-region loads, stores and release stores since the last call.
    fn shared_accesses() -> (u64, u64, u64) {
        let (mut loads, mut stores, mut releases) = (0, 0, 0);
        // SAFETY: writes three integers.
        unsafe { ffi::rv_host_shared_accesses(&mut loads, &mut stores, &mut releases, 1) };
        (loads, stores, releases)
    }

    impl Drop for HandStepped {
        fn drop(&mut self) {
            // SAFETY: created by rv_cpu_grid_new, freed once.
            unsafe { ffi::rv_cpu_grid_free(self.view) }
        }
    }

    #[test]
    fn block0_carries_out_a_bounded_number_of_commands_per_step_and_beats_after_each() {
        const COMMANDS: u32 = 2500;
        let d = HandStepped::new(COMMANDS);
        for slot in 0..COMMANDS {
            d.command(slot, RV_OP_KILL, slot, 0); // a kill of a dormant slot: answered at once (an error event)
        }
        d.grid.publish_command_tail(COMMANDS);
        let per_step = RV_COMMANDS_PER_STEP;
        for step in 1..=COMMANDS / per_step {
            d.step_block0();
            let (heartbeat, processed, events) = d.grid.block0_counters();
            assert_eq!(d.grid.command_head(), step * per_step, "at most {per_step} commands per step");
            assert_eq!(processed, u64::from(step * per_step));
            assert_eq!(events, u64::from(step * per_step), "one event per command");
            // one beat per step, and one after every command
            assert_eq!(heartbeat, u64::from(step * (1 + per_step)));
        }
        d.step_block0();
        assert_eq!(d.grid.command_head(), COMMANDS, "the rest in the next step");
    }

    /// On a GPU every shared-region access of an actor's step crosses PCIe: an idle Active actor's step reads one
    /// word (`host_seq`) and writes nothing but its heartbeat, at most once per `RV_IDLE_BEAT_NS`; a message
    /// (which bumps `host_seq`) makes the next step a full one.
    #[test]
    fn an_idle_active_actors_step_reads_one_shared_word_and_beats_at_a_bounded_rate() {
        let d = HandStepped::with_settled_echo();
        const STEPS: u64 = 100_000;
        shared_accesses();
        let started = std::time::Instant::now();
        for _ in 0..STEPS {
            assert_eq!(d.step_actor(0), 0, "idle");
        }
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let (loads, stores, _) = shared_accesses();
        let beats = stores; // the heartbeat is the only store
        assert!(beats <= elapsed_ms + 1, "{beats} heartbeats in {elapsed_ms} ms");
        // one load per step, plus the device-fault check at each beat
        assert!(loads <= STEPS + beats, "{loads} shared loads in {STEPS} idle steps");
        assert!(loads >= STEPS, "the idle step reads host_seq: {loads}");

        // a message wakes it: the step after it is a full one and replies
        let env = RawEnvelope { kind: RV_KIND_USER as u8, payload_len: 8, correlation: 7, ..zeroed_envelope() };
        d.grid.write_inbox(0, 0, &env);
        d.grid.publish_inbox_tail(0, 1);
        assert_ne!(d.step_actor(0) & RV_STEP_REPLIED, 0, "the message is processed at once");
        let (loads, _, _) = shared_accesses();
        assert!(loads > 3, "a full step: {loads} loads");
    }

    /// The actor's side of a call's critical path: the step that answers one message makes at most this many
    /// system-scope loads and stores (each a PCIe transaction on a GPU; measured with the host build's
    /// counters, which see the protocol's atomics, not its plain field accesses: these are the actor's own fields,
    /// read from its record in the local region). A change that adds one shows here without a GPU. The four:
    /// `host_seq` with the inbox tail (one 64-bit load), then the device faults, the slot's fault bits and its
    /// state, issued together with the envelope's copy (12 counted, and 7 plain reads of the control block, before
    /// issue 37's cuts; 5 before the tail was read with `host_seq`). The three stores: the
    /// processed count and the heartbeat (relaxed: posted, nothing waits for them), and the inbox head with the
    /// outbox tail in one release store (two releases before: each waits, on a GPU, for the earlier stores to
    /// reach the host).
    #[test]
    fn the_step_that_answers_a_call_makes_a_bounded_number_of_shared_accesses() {
        const LOADS: u64 = 4;
        const STORES: u64 = 3;
        const RELEASES: u64 = 1;
        let d = HandStepped::with_settled_echo();
        let mut counted = Vec::new();
        for index in 0..3u32 {
            let env = RawEnvelope {
                kind: RV_KIND_USER as u8,
                payload_len: 8,
                correlation: u64::from(index) + 1,
                ..zeroed_envelope()
            };
            d.grid.write_inbox(0, index, &env);
            d.grid.publish_inbox_tail(0, index + 1);
            shared_accesses();
            assert_ne!(d.step_actor(0) & RV_STEP_REPLIED, 0, "answered in one step");
            counted.push(shared_accesses());
        }
        for (loads, stores, releases) in counted {
            assert!(
                loads <= LOADS && stores <= STORES && releases <= RELEASES,
                "{loads} loads (at most {LOADS}), {stores} stores (at most {STORES}), {releases} of them releases \
                 (at most {RELEASES})"
            );
        }
    }

    fn zeroed_envelope() -> RawEnvelope {
        // SAFETY: plain data; all-zero is a valid envelope.
        unsafe { std::mem::zeroed() }
    }

    /// Events are built on block 0's stack and copied into the ring 16 bytes at a time: what the host reads is
    /// what was built (a copy through a cast to a 16-byte struct once let the compiler drop the stores).
    #[test]
    fn an_event_copied_into_the_ring_carries_every_field() {
        let d = HandStepped::new(2);
        d.create(0, 1, 2); // counter in slot 1
        d.grid.publish_command_tail(1);
        d.step_block0(); // prepares the creation
        assert_eq!(d.grid.event_tail(), 0, "the init runs on the actor's block");
        assert_ne!(d.step_actor(1) & RV_STEP_ATTENTION, 0, "the init ran");
        d.step_block0(); // publishes the event
        let e = d.grid.read_event(0);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert_eq!(
            (e.kind, e.slot, e.generation, e.state, e.cmd_id, e.op),
            (RV_EVT_CREATED, 1, 1, RV_STATE_ACTIVE, 1, RV_OP_CREATE)
        );
        assert_eq!((e.code, e.failed_index, e.messages_processed), (0, RV_NO_INDEX, 0));
        assert!(now.abs_diff(e.time_ns) < 60_000_000_000, "time {} vs {now}", e.time_ns);
    }
}
