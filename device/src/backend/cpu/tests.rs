//! Tests of the CPU executor: block 0's and an actor's steps as the workers run them, and their shared accesses.

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
        publish_call(&d.grid, index, u64::from(index) + 1);
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

/// Writes an 8-byte call with `correlation` into slot 0's inbox at `index` and publishes it (the tail, then
/// `host_seq`), as the host's writer does, with no run-set mark.
fn publish_call(grid: &SharedGrid, index: u32, correlation: u64) {
    let env = RawEnvelope { kind: RV_KIND_USER as u8, payload_len: 8, correlation, ..zeroed_envelope() };
    grid.write_inbox(0, index, &env);
    grid.publish_inbox_tail(0, index + 1);
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

/// A grid as the pool's workers run it, with no worker: the test runs passes and watches itself.
struct WorkerlessGrid {
    grid: Arc<CpuShared>,
    host: SharedGrid,
    me: WorkerState,
}

impl WorkerlessGrid {
    /// Two slots, an echo actor in slot 0, passes run until nothing is marked.
    fn with_echo() -> Self {
        Self::with_echo_and_wake(Arc::new(|| {}))
    }

    /// [`WorkerlessGrid::with_echo`] with `host_side` told when a step published replies.
    fn with_echo_and_wake(host_side: Arc<dyn HostSide>) -> Self {
        let params = RawGridParams {
            slot_count: 2,
            inbox_capacity: 4,
            outbox_capacity: 4,
            k2k_capacity: 2,
            command_capacity: 16,
            event_capacity: 16,
            state_bytes: 64,
            bulk_bytes: 0,
        };
        let header = super::super::compute_layout(&params).unwrap();
        let table = BehaviourSet::builtins().host_table();
        let grid = Arc::new(CpuShared::new(&CpuConfig::default(), header, table, host_side).unwrap());
        // SAFETY: the header was written by CpuShared::new; the region lives as long as `grid` (both in Self).
        let host = unsafe { SharedGrid::new(grid._shared.as_ptr()) };
        let me = WorkerState::new();
        let cmd = RawCommand {
            op: RV_OP_CREATE,
            slot: 0,
            expected_generation: 0,
            behaviour: 1, // echo
            cmd_id: 1,
            inbox_index: 0,
            init_len: 0,
            init: [0; RV_INIT_BYTES as usize],
        };
        host.write_command(0, &cmd);
        host.publish_command_tail(1);
        for rotation in 0..16 {
            grid.pass(&me, rotation);
        }
        assert!(!grid.has_marked_work(), "the creation settled");
        Self { grid, host, me }
    }

    /// Writes a call to slot 0 at inbox `index` (correlation `index` + 100) and publishes it, without a run-set
    /// mark.
    fn publish_call(&self, index: u32) {
        publish_call(&self.host, index, u64::from(index) + 100);
    }

    fn mark(&self, slot: u32) {
        // SAFETY: the view is valid while `grid` lives; the C side checks the slot.
        assert_eq!(unsafe { ffi::rv_cpu_mark_work(self.grid.view.0, slot) }, 1, "slot {slot} was not marked");
    }
}

/// What a grid's passes told the host, by kind.
#[derive(Default)]
struct Told {
    published: AtomicU32,
    events: AtomicU32,
}

impl HostSide for Told {
    fn published(&self) {
        self.published.fetch_add(1, Ordering::SeqCst);
    }

    fn events_published(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
    }
}

/// A pass tells the host of block 0's events as such (the host may read them on the worker's thread), and of an
/// actor's replies alone by waking the host's reader.
#[test]
fn a_pass_tells_the_host_of_block_0s_events_apart_from_replies() {
    let told = Arc::new(Told::default());
    let w = WorkerlessGrid::with_echo_and_wake(told.clone());
    let events = told.events.load(Ordering::SeqCst);
    assert!(events >= 1, "the creation's events, told as events");
    assert_eq!(told.published.load(Ordering::SeqCst), 0, "nothing else was published");
    w.publish_call(0);
    w.mark(0);
    w.grid.pass(&w.me, 0);
    assert_eq!(w.host.outbox_tail(0), 1, "the call was answered");
    assert_eq!(told.events.load(Ordering::SeqCst), events, "no event this time");
    assert_eq!(told.published.load(Ordering::SeqCst), 1, "the reply woke the host's reader");
}

/// A watching worker answers a message as soon as the host publishes it, with no run-set mark: the mark is for
/// the other workers (the host still sets it), the watch a quicker look.
#[test]
fn a_watch_runs_the_watched_slots_step_when_the_host_publishes_to_it() {
    let w = WorkerlessGrid::with_echo();
    let published = std::cell::Cell::new(false);
    let watch = w.grid.watch(&w.me, 0, 64, &|| {
        if !published.replace(true) {
            w.publish_call(0); // while the watch runs
        }
        false
    });
    assert!(watch.found_work, "the step made progress");
    assert_eq!(watch.pauses, 64, "watched to the end");
    assert_eq!(w.host.outbox_tail(0), 1, "the call was answered");
    assert_eq!(w.host.read_outbox(0, 0).correlation, 100);
    assert!(!w.grid.has_marked_work(), "nothing was marked: the watch found the message by `host_seq`");
}

/// The watched slot's own mark (here a message published and marked before the watch began) is taken and its
/// step run by the watch: no other worker steps the slot for it.
#[test]
fn a_watch_takes_its_slots_own_mark_and_runs_the_step() {
    let w = WorkerlessGrid::with_echo();
    w.publish_call(0);
    w.mark(0);
    let watch = w.grid.watch(&w.me, 0, 8, &|| false);
    assert!(watch.found_work);
    assert_eq!(w.host.outbox_tail(0), 1, "the call was answered");
    assert!(!w.grid.has_marked_work(), "the mark was taken");
}

/// A mark of another slot, or work in another grid of the pool, ends the watch at its next look (every
/// `WATCH_MARKS_EVERY` pauses), leaving the mark for the worker's pass.
#[test]
fn a_watch_goes_back_to_the_passes_when_other_work_appears() {
    let w = WorkerlessGrid::with_echo();
    w.mark(1);
    let watch = w.grid.watch(&w.me, 0, 64, &|| false);
    assert!(watch.found_work);
    assert_eq!(watch.pauses, WATCH_MARKS_EVERY, "left at the first look");
    assert!(w.grid.has_marked_work(), "slot 1's mark left for a pass");
    // SAFETY: the view is valid; word 0 is a run-set word of this grid.
    assert_eq!(unsafe { ffi::rv_cpu_take_one_marked(w.grid.view.0, 0, 0) }, 1, "slot 1 marked, slot 0 not");

    let watch = w.grid.watch(&w.me, 0, 64, &|| true);
    assert!(watch.found_work);
    assert_eq!(watch.pauses, WATCH_MARKS_EVERY, "left at the first look");
}

/// One worker watches a grid at a time; a second returns at once, and the grid can be watched again after.
#[test]
fn a_grid_has_one_watcher_at_a_time() {
    let w = WorkerlessGrid::with_echo();
    let inner = std::cell::Cell::new(None);
    w.grid.watch(&w.me, 0, 8, &|| {
        inner.set(Some(w.grid.watch(&w.me, 0, 8, &|| false).pauses));
        false
    });
    assert_eq!(inner.get(), Some(0), "the second watcher returned at once");
    assert_eq!(w.grid.watch(&w.me, 0, 8, &|| false).pauses, 8, "watched again once the first ended");
}

/// While a watcher runs the step it found, the grid's watch is let go (a step may never return: a behaviour's
/// endless loop must not keep the grid from being watched by another worker), and taken back after.
#[test]
fn a_watcher_lets_the_watch_go_while_it_runs_a_step() {
    let grid_slot: Arc<std::sync::OnceLock<std::sync::Weak<CpuShared>>> = Arc::default();
    let watched_during_step: Arc<std::sync::Mutex<Vec<bool>>> = Arc::default();
    let (slot, seen) = (grid_slot.clone(), watched_during_step.clone());
    let wake = Arc::new(move || {
        // called once a step published replies, before the step's caller returns (no grid yet while it is made)
        if let Some(grid) = slot.get().and_then(std::sync::Weak::upgrade) {
            seen.lock().unwrap().push(grid.watcher.load(Ordering::Acquire));
        }
    });
    let w = WorkerlessGrid::with_echo_and_wake(wake);
    grid_slot.set(Arc::downgrade(&w.grid)).expect("set once");
    let published = std::cell::Cell::new(false);
    let watch = w.grid.watch(&w.me, 0, 16, &|| {
        if !published.replace(true) {
            w.publish_call(0);
        }
        assert!(w.grid.watcher.load(Ordering::Acquire), "held while watching");
        false
    });
    assert!(watch.found_work);
    assert_eq!(watch.pauses, 16, "the watch went on after the step");
    assert_eq!(*watched_during_step.lock().unwrap(), vec![false], "let go during the one step");
    assert!(!w.grid.watcher.load(Ordering::Acquire), "let go when the watch ended");
}
