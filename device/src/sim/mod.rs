//! A deterministic simulator of the device protocol: the real device code (`kernels/`, block 0 and the actor
//! blocks, as the persistent kernel runs them on a GPU) and the host's real shared-region layer (`shared.rs`)
//! run as threads of which exactly one runs at a time. The turn passes only at the points where the two sides
//! meet (every access of the shared region, fences, synchronising accesses of the local region, pauses), to a
//! thread a seeded generator picks; time is the simulator's and moves with those points; stores to the shared
//! region become visible to the other threads late, within what PTX's model (device) and x86-TSO (host) allow
//! (`sched.rs`). So one seed is one interleaving, replayed exactly, and a few hundred seeds try interleavings and
//! store orders that a machine's timing shows rarely or never.
//!
//! The host's side of a run is a model of what `Device` does with the rings (`model.rs`): it creates the slots
//! (all at once: a burst of commands), calls them, injects crashes before calls, restarts what failed, reads
//! events and replies, and watches block 0's heartbeat; and it checks the protocol's promises as it goes (see
//! [`run`]). docs/faults.md describes the simulator, its memory model and what it does not model.
//!
//! `device/tests/simulation.rs` runs it in CI; `RINGVISOR_SIM_SEED=N cargo test -p ringvisor-device --test
//! simulation replay -- --nocapture` replays one seed.

mod model;

use crate::backend::compute_layout;
use crate::backend::region::HostRegion;
use crate::behaviour::BehaviourSet;
use crate::ffi;
use crate::interleave::{self, Policy, Rng, Scheduler, Side};
use crate::layout::{RawGridHeader, RawGridParams};
use crate::shared::SharedGrid;
use std::sync::Arc;

/// An ordering defect that a GPU found in the protocol and that was fixed, put back for a run so that the
/// simulator can show it finds it (`RV_DEFECT_*` in `kernels/rv_port.h`; the host build only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// An actor published a reply before it moved its inbox head past the message: a host that had read the
    /// reply could find the message still unconsumed (an H100, fixed 2026-11-23).
    ReplyBeforeConsumed,
    /// An actor read its fault bits before its inbox tail: a message sent after a `CrashNextMessage` could be
    /// processed without the crash meant for it (an H100).
    FaultsBeforeTail,
    /// Block 0 carried out every queued command in one step and beat once a step: a burst of commands stopped
    /// its heartbeat long enough for a working device to be taken for a lost one (an H100, then an H200).
    KeeperBeatsOnceAStep,
    /// An actor read the device's fault word before its inbox tail: a message sent into a device stall could be
    /// processed (found by this simulator, seed 61, 2026-11-26).
    DeviceFaultsBeforeTail,
    /// An actor took a due one-shot fault's kind from the bits it read at the start of its step: a corruption
    /// injected after a consumed crash could crash the actor again (found by this simulator, seed 9).
    OneShotKindFromStep,
    /// An actor published the error answering a corrupt message before it moved its inbox head past the message
    /// (the first defect, in the path for bad envelopes: found by this simulator, seed 165).
    ErrorReplyBeforeConsumed,
}

impl Defect {
    /// All of them: the three a GPU found, then the three this simulator found.
    pub const ALL: [Defect; 6] = [
        Defect::ReplyBeforeConsumed,
        Defect::FaultsBeforeTail,
        Defect::KeeperBeatsOnceAStep,
        Defect::DeviceFaultsBeforeTail,
        Defect::OneShotKindFromStep,
        Defect::ErrorReplyBeforeConsumed,
    ];

    fn bit(self) -> u32 {
        1 << match self {
            Defect::ReplyBeforeConsumed => 0,
            Defect::FaultsBeforeTail => 1,
            Defect::KeeperBeatsOnceAStep => 2,
            Defect::DeviceFaultsBeforeTail => 3,
            Defect::OneShotKindFromStep => 4,
            Defect::ErrorReplyBeforeConsumed => 5,
        }
    }
}

/// What one run is: its seed (which picks everything else: the tree's size, the host's operations, the schedule
/// and the memory's choices) and the defects put back.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Defects put back for this run (none: today's protocol).
    pub defects: Vec<Defect>,
    /// Host operations (calls, crash injections, polls) after the slots are up; `None`: picked by the seed.
    pub operations: Option<u32>,
}

impl SimConfig {
    /// A run of today's protocol with `seed`.
    pub fn seed(seed: u64) -> Self {
        Self { seed, defects: Vec::new(), operations: None }
    }

    /// The same run with `defect` put back.
    pub fn with_defect(mut self, defect: Defect) -> Self {
        self.defects.push(defect);
        self
    }

    /// The same run with `n` host operations.
    pub fn operations(mut self, n: u32) -> Self {
        self.operations = Some(n);
        self
    }
}

/// What a run that kept every promise did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// The run's seed.
    pub seed: u64,
    /// Slots created.
    pub slots: u32,
    /// Calls sent.
    pub calls: u64,
    /// Calls answered.
    pub answered: u64,
    /// Crashes injected and seen (a `Failed` event each).
    pub crashes: u64,
    /// Messages handed back (left to an incarnation that ended, or to a lost device, before it got to them).
    pub handed_back: u64,
    /// Whether the device was lost (and the run ended with it).
    pub lost: bool,
    /// Calls a lost device consumed and never answered (dead letters).
    pub dead: u64,
    /// Points (turns that could have passed) in the run.
    pub points: u64,
    /// Simulated time the run took, in nanoseconds.
    pub simulated_ns: u64,
}

/// A promise the protocol broke in a run, with how to replay it.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The run's seed.
    pub seed: u64,
    /// Defects that were put back.
    pub defects: Vec<Defect>,
    /// Host operations of the run.
    pub operations: u32,
    /// Which promise, and the facts that break it.
    pub violation: String,
    /// The last points before it was seen (simulated time, thread, what).
    pub recent: Vec<String>,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seed {} (defects {:?}, {} operations): {}",
            self.seed, self.defects, self.operations, self.violation
        )?;
        writeln!(
            f,
            "replay: RINGVISOR_SIM_SEED={} RINGVISOR_SIM_OPERATIONS={} cargo test -p ringvisor-device --test simulation \
             replay -- --nocapture",
            self.seed, self.operations
        )?;
        writeln!(f, "last points before it:")?;
        for line in &self.recent {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// A run's shape, drawn from its seed.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// Slots of the device (every one created at once).
    pub slots: u32,
    /// Slots of each actor block.
    pub slots_per_block: u32,
    /// Host operations after the creates.
    pub operations: u32,
    /// How often each kind of operation is drawn (swarm testing: each run leaves some kinds out and leans on
    /// others, which finds more than one mix for all).
    pub mix: Mix,
    /// How long the host pauses when a poll found nothing (simulated).
    pub poll_pause_ns: u64,
    /// Longest the host waits between the calls that keep an actor busy and the fault it then injects.
    pub think_ns: u64,
    /// The operation before which the device is lost (its blocks frozen between two accesses), ending the run.
    pub lose_at: Option<u32>,
    /// Print the host's actions and what it reads (`RINGVISOR_SIM_TRACE=1`, for a replay).
    pub trace: bool,
    /// How the scheduler times the run.
    pub policy: Policy,
}

impl Plan {
    fn draw(config: &SimConfig) -> Self {
        let mut rng = Rng::new(config.seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
        // mostly small trees (more crashes and calls a run); one run in five a burst of 64 creates
        let slots = [2, 3, 4, 6, 64][rng.below(5) as usize];
        let slots_per_block = if slots > 8 { 16 } else { 1 + rng.below(2) as u32 };
        // drawn whether or not the config sets it, so that the rest of the plan is the same either way (a run
        // shortened by `minimise` is the same run cut short)
        let drawn = if slots > 8 { 60 } else { 150 + rng.below(150) as u32 };
        let operations = config.operations.unwrap_or(drawn);
        // one run in four loses its device, at an operation drawn from the whole run (so a shortened run still
        // loses it where the whole one did, or not at all)
        let lose_at = rng.chance(250).then(|| rng.below(300) as u32);
        Plan {
            slots,
            slots_per_block,
            operations,
            lose_at,
            trace: std::env::var_os("RINGVISOR_SIM_TRACE").is_some_and(|v| v == "1"),
            mix: Mix::draw(&mut rng),
            poll_pause_ns: [200, 2_000, 10_000][rng.below(3) as usize],
            think_ns: [5_000, 15_000, 40_000][rng.below(3) as usize],
            policy: Policy {
                device_shared_ns: [300, 1_000, 2_500][rng.below(3) as usize],
                host_shared_ns: [20, 60, 150][rng.below(3) as usize],
                other_ns: 20,
                jitter_percent: [10, 50, 90][rng.below(3) as usize],
                stall_per_mille: [0, 2, 20][rng.below(3) as usize],
                stall_ns: [5_000, 50_000][rng.below(2) as usize],
                device_delay_ns: [500, 3_000, 20_000][rng.below(3) as usize],
                host_delay_ns: [50, 200, 1_000][rng.below(3) as usize],
                buffer: [2, 8, 32][rng.below(3) as usize],
                point_limit: 3_000_000,
            },
        }
    }
}

/// The weights of the host's operations in one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mix {
    pub call: u64,
    pub burst: u64,
    pub crash: u64,
    pub corrupt: u64,
    pub stall: u64,
    pub kill: u64,
    pub drain: u64,
    pub device_stall: u64,
    /// Calls an actor forwards to another (kernel to kernel).
    pub forward: u64,
}

impl Mix {
    fn draw(rng: &mut Rng) -> Self {
        let mut pick = |weights: [u64; 4]| weights[rng.below(4) as usize];
        Mix {
            call: 10,
            burst: pick([2, 6, 12, 12]),
            crash: pick([0, 2, 6, 20]),
            corrupt: pick([0, 2, 6, 20]),
            stall: pick([0, 2, 6, 20]),
            kill: pick([0, 1, 3, 3]),
            drain: pick([0, 1, 3, 3]),
            device_stall: pick([0, 1, 4, 12]),
            forward: pick([0, 3, 10, 10]),
        }
    }
}

/// The shape of a device a run opens: small rings, so they wrap and fill.
fn params(slots: u32) -> RawGridParams {
    RawGridParams {
        slot_count: slots,
        inbox_capacity: 8,
        outbox_capacity: 4,
        k2k_capacity: 4,
        command_capacity: 128,
        event_capacity: 256,
        state_bytes: 64,
        bulk_bytes: 0,
    }
}

/// Block 0's heartbeat still this long (simulated) while it works: the device would be declared lost.
pub(crate) const LOST_AFTER_NS: u64 = 500_000;

/// Most messages a step of one actor takes.
const BUDGET: u32 = 4;
/// Longest idle pause of block 0 and of an actor block (simulated).
const KEEPER_BACKOFF_NS: u32 = 20_000;
const ACTOR_BACKOFF_NS: u32 = 50_000;

/// Shortens a failing run: the fewest host operations with which the same seed still breaks a promise (a run
/// with fewer operations is the same run up to where it stops, so this is the failing schedule cut short).
/// Returns the shortest failure found, or `None` if `config` does not fail.
pub fn minimise(config: &SimConfig) -> Option<SimFailure> {
    let mut failure = run(config).err()?;
    let (mut low, mut high) = (0, failure.operations);
    // invariant: `high` operations fail; `low` operations were not seen to fail (0: nothing to cut below)
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        match run(&SimConfig { operations: Some(mid), ..config.clone() }) {
            Err(f) => {
                high = mid;
                failure = f;
            }
            Ok(_) => low = mid,
        }
    }
    Some(failure)
}

/// Runs one simulation: a device of the seed's shape on simulated threads (block 0, the actor blocks, the host's
/// model), until the host's operations are done and every message has had its answer or been handed back.
///
/// The promises checked as it runs: every call is answered once, crashed on once or handed back once (left to an
/// incarnation that ended, or to a lost device), never two of these and never none; a reply is read only after
/// its message is consumed (the inbox head past it) and counted; nothing sent after a `CrashNextMessage`, a
/// `CorruptNextMessage` or into a stall (the slot's or the device's) is answered by the incarnation the fault was
/// meant for before the fault acted; error answers only for corruptions and `TargetGone`; generations only grow;
/// every event is one the host's commands and faults explain; block 0's heartbeat never stands still for the
/// loss detector's window while block 0 works, and a lost device is noticed (docs/faults.md).
pub fn run(config: &SimConfig) -> Result<SimReport, SimFailure> {
    let plan = Plan::draw(config);
    let fail = |violation: String, recent: Vec<String>| SimFailure {
        seed: config.seed,
        defects: config.defects.clone(),
        operations: plan.operations,
        violation,
        recent,
    };
    let header = compute_layout(&params(plan.slots)).map_err(|e| fail(format!("layout: {e}"), Vec::new()))?;
    let shared = HostRegion::zeroed(header.shared_bytes).map_err(|e| fail(e.to_string(), Vec::new()))?;
    let local = HostRegion::zeroed(header.local_bytes).map_err(|e| fail(e.to_string(), Vec::new()))?;
    // SAFETY: the region is at least shared_bytes >= sizeof(header) long and page-aligned.
    unsafe { std::ptr::write(shared.as_ptr() as *mut RawGridHeader, header) };
    let table = BehaviourSet::builtins().host_table();
    let blocks = 1 + plan.slots.div_ceil(plan.slots_per_block);
    for block in 0..blocks {
        // SAFETY: both regions are laid out for `header`; the init entry writes only inside them.
        unsafe { ffi::rv_emu_init_block(shared.as_ptr(), local.as_ptr(), block, blocks, 1) };
    }
    interleave::install_hook();

    let mut threads: Vec<(Side, &'static str)> = vec![(Side::Device, "block0")];
    threads.extend((1..blocks).map(|_| (Side::Device, "actors")));
    threads.push((Side::Host, "host"));
    let host_index = threads.len() - 1;
    let sched = Arc::new(Scheduler::new(
        config.seed,
        plan.policy,
        &threads,
        (shared.as_ptr() as usize, header.shared_bytes as usize),
    ));
    let defects = config.defects.iter().fold(0, |bits, d| bits | d.bit());
    let (shared_ptr, local_ptr, table_ptr) =
        (shared.as_ptr() as usize, local.as_ptr() as usize, table.as_ptr() as usize);

    let mut handles = Vec::new();
    for block in 0..blocks {
        let s = sched.clone();
        let spb = plan.slots_per_block;
        handles.push(std::thread::spawn(move || {
            s.register(block as usize);
            interleave::enter(&s, block as usize);
            // SAFETY: the regions and the table outlive the run (they are dropped after every thread is joined);
            // the entry runs the device code on them until the host asks the grid to terminate.
            unsafe {
                ffi::rv_sim_enter(1, defects);
                ffi::rv_sim_block(
                    shared_ptr as *mut u8,
                    local_ptr as *mut u8,
                    table_ptr as *const Option<ffi::BehaviourFn>,
                    block,
                    spb,
                    BUDGET,
                    KEEPER_BACKOFF_NS,
                    ACTOR_BACKOFF_NS,
                );
                ffi::rv_sim_enter(0, 0);
            }
            interleave::leave();
            s.finish(block as usize);
        }));
    }
    let host = {
        let s = sched.clone();
        let plan = plan.clone();
        let seed = config.seed;
        std::thread::spawn(move || {
            s.register(host_index);
            interleave::enter(&s, host_index);
            // SAFETY: the region outlives the run, and its header was written above.
            let grid = unsafe { SharedGrid::new(shared_ptr as *mut u8) };
            let outcome = model::Model::new(&grid, &s, host_index, seed, plan, blocks).run().map(|mut report| {
                // as the host's side ends (the blocks then run on until they see the terminate)
                report.points = s.points();
                report.simulated_ns = s.elapsed_ns();
                report
            });
            grid.request_terminate();
            interleave::leave();
            s.finish(host_index);
            outcome
        })
    };
    while !sched.all_registered() {
        std::thread::yield_now();
    }
    sched.start();
    let outcome = host.join().map_err(|_| fail("the host's model panicked".into(), sched.recent()));
    if outcome.is_err() {
        // the blocks wait for a turn nobody will give: ask the grid to terminate (this thread is not simulated)
        // and let them run to their end
        // SAFETY: the region outlives the device threads (dropped after they are joined), its header written.
        unsafe { SharedGrid::new(shared_ptr as *mut u8) }.request_terminate();
        sched.run_free();
    }
    sched.release_frozen(); // the blocks of a lost device run to their end (the host asked them to terminate)
                            // every block joined before the regions are dropped, whatever happened
    let joined: Vec<bool> = handles.into_iter().map(|h| h.join().is_ok()).collect();
    let blocks_ended = joined.iter().all(|&ok| ok);
    drop((shared, local, table));
    let outcome = outcome?;
    if !blocks_ended {
        return Err(fail("a device thread panicked".into(), sched.recent()));
    }
    match outcome {
        Ok(mut report) => {
            report.seed = config.seed;
            Ok(report)
        }
        Err((violation, recent)) => Err(fail(violation, recent)),
    }
}
