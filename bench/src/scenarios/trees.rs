//! Supervised trees at scale: start, stop, memory, idle CPU and calls of a tree of GPU children against a ractor
//! tree of the same size.

use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use ringvisor::device::DeviceConfig;
use ringvisor::prelude::*;

use super::{elapsed_ns, tokio, ECHO, T};
use crate::stats::{Summary, Unit};

/// What a supervised tree of GPU children costs, from [`supervised_tree`].
pub struct TreeCost {
    /// `Runtime::start` of the whole tree (device open included), each start.
    pub start: Summary,
    /// `Runtime::shutdown` (every child stopped in reverse order, then the device), each stop.
    pub stop: Summary,
    /// The baseline of `start`: [`ractor_tree`]'s spawns, interleaved with the tree's starts.
    pub spawn_baseline: Summary,
    /// The baseline of `stop`: [`ractor_tree`]'s stops.
    pub stop_baseline: Summary,
    /// Heap bytes per supervised child beyond the device's regions (slot actor, handle, registry entry,
    /// tree bookkeeping).
    pub memory: Summary,
    /// Share of one core the process uses while the tree sits idle.
    pub idle_cpu: Summary,
    /// `GpuActorRef::call` round trip to one child while the others sit idle.
    pub call: Summary,
    /// A monitor's sample of the steady tree (its listings cached: no supervisor asked).
    pub sample: Summary,
    /// The monitor's first sample, which lists every child (`which_children` of each supervisor).
    pub first_sample: Summary,
}

/// The device configuration of the scale rows: `DeviceConfig::compact` sized for `children` (and a few
/// spare slots), as a user would size it.
fn compact_device(children: u32) -> DeviceConfig {
    DeviceConfig::compact().slots(children + 8)
}

/// Samples of the steady tree a monitor takes in [`supervised_tree`].
const MONITOR_SAMPLES: usize = 10;

/// One one_for_one supervisor with `children` `counter` GPU children (names `fleet/c<i>`), started and
/// stopped `starts` times, each time followed by the same for its ractor baseline (one noisy moment of the
/// machine falls on both); the first time also measures memory, idle CPU, `calls` calls to one child and the
/// monitor's samples.
pub fn supervised_tree(children: u32, calls: usize, starts: usize) -> TreeCost {
    let cost = steady_tree(children, calls);
    let (mut ours, mut theirs) = ((vec![cost.start], vec![cost.stop]), (Vec::new(), Vec::new()));
    for i in 0..starts {
        let (spawn, stop) = ractor_tree(children);
        theirs.0.push(spawn);
        theirs.1.push(stop);
        if i + 1 < starts {
            let (start, stop) = tree_start_stop(children);
            ours.0.push(start);
            ours.1.push(stop);
        }
    }
    let label = |what: &str| format!("ringvisor, {children} supervised GPU children, {what}");
    let baseline = |what: &str| format!("ractor, {children} linked actors under one actor, {what}");
    TreeCost {
        start: Summary::of(&label("start"), ours.0, Unit::Nanos),
        stop: Summary::of(&label("stop"), ours.1, Unit::Nanos),
        spawn_baseline: Summary::of(&baseline("spawn"), theirs.0, Unit::Nanos),
        stop_baseline: Summary::of(&baseline("stop"), theirs.1, Unit::Nanos),
        memory: cost.memory,
        idle_cpu: cost.idle_cpu,
        call: cost.call,
        sample: cost.sample,
        first_sample: cost.first_sample,
    }
}

/// One one_for_one supervisor of `children` `counter` GPU children `fleet/c{i}`, each as `child` makes it.
fn fleet_with(children: u32, child: impl Fn(GpuChild) -> GpuChild) -> SupervisorSpec {
    let mut spec = SupervisorSpec::new(Strategy::OneForOne);
    for i in 0..children {
        let id = format!("c{i}");
        spec = spec.child(ChildSpec::gpu(&id, child(GpuChild::new("counter"))).name(format!("fleet/{id}")));
    }
    spec
}

/// The spec of [`supervised_tree`]: unmirrored children.
fn fleet(children: u32) -> SupervisorSpec {
    fleet_with(children, |c| c.mirrored(false))
}

/// How the children of [`mirrored_tree`] are mirrored and used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorUse {
    /// Mirrored as by default: each mirror spawned when first asked for; none is asked for.
    OnDemand,
    /// The same, and every child's mirror asked for once the tree has started (timed with the start).
    AllAsked,
    /// Each mirror registered in ractor's registry, so spawned as its child starts.
    Registered,
}

impl MirrorUse {
    /// The row's words.
    pub fn label(self) -> &'static str {
        match self {
            MirrorUse::OnDemand => "mirrors on demand (the default), none asked for",
            MirrorUse::AllAsked => "mirrors on demand, every one asked for",
            MirrorUse::Registered => "mirrors registered by name (spawned at start)",
        }
    }
}

/// What a tree of mirrored GPU children costs, from [`mirrored_tree`].
pub struct MirroredCost {
    /// `Runtime::start` of the tree (and, [`MirrorUse::AllAsked`], asking for every mirror), each start.
    pub start: Summary,
    /// Its baseline: [`ractor_tree`]'s spawns of as many actors, interleaved.
    pub spawn_baseline: Summary,
    /// Heap bytes per child beyond the device's regions (the mirrors included), first start.
    pub memory: Summary,
}

/// One one_for_one supervisor with `children` `counter` GPU children mirrored as `usage` says, started and
/// stopped `starts` times, each time followed by [`ractor_tree`]'s spawn of as many actors.
pub fn mirrored_tree(children: u32, starts: usize, usage: MirrorUse) -> MirroredCost {
    let (mut ours, mut theirs, mut memory) = (Vec::new(), Vec::new(), 0.0);
    for i in 0..starts {
        let spec = match usage {
            MirrorUse::OnDemand | MirrorUse::AllAsked => fleet_with(children, |c| c.mirrored(true)),
            MirrorUse::Registered => fleet_with(children, GpuChild::mirror_registered),
        };
        let (start, per_child) = tokio().block_on(async {
            let before = crate::heap::live_bytes();
            let t0 = Instant::now();
            let r = ringvisor::Runtime::start(compact_device(children), spec).await.expect("runtime");
            if usage == MirrorUse::AllAsked {
                for c in 0..children {
                    let gpu = r.gpu(&format!("fleet/c{c}")).expect("a child");
                    assert!(gpu.mirror().is_some(), "a running mirrored child has its mirror when asked");
                }
            }
            let start = elapsed_ns(t0);
            let per_child = (crate::heap::live_bytes() - before) as f64 / f64::from(children);
            let mirror = r.gpu(&format!("fleet/c{}", children / 2)).and_then(|g| g.mirror());
            assert!(mirror.is_some(), "a mirrored child has its mirror once the tree has started");
            r.shutdown().await;
            (start, per_child)
        });
        ours.push(start);
        if i == 0 {
            memory = per_child;
        }
        theirs.push(ractor_tree(children).0);
    }
    let label = |what: &str| format!("ringvisor, {children} mirrored GPU children ({}), {what}", usage.label());
    MirroredCost {
        start: Summary::of(&label("start"), ours, Unit::Nanos),
        spawn_baseline: Summary::of(
            &format!("ractor, {children} linked actors under one actor, spawn"),
            theirs,
            Unit::Nanos,
        ),
        memory: Summary::of(&label("heap per child beyond regions"), vec![memory], Unit::Bytes),
    }
}

/// One start and stop of [`fleet`], in nanoseconds.
fn tree_start_stop(children: u32) -> (f64, f64) {
    tokio().block_on(async {
        let spec = fleet(children);
        let t0 = Instant::now();
        let r = ringvisor::Runtime::start(compact_device(children), spec).await.expect("runtime");
        let start = elapsed_ns(t0);
        let t0 = Instant::now();
        r.shutdown().await;
        (start, elapsed_ns(t0))
    })
}

/// What one start of [`fleet`] measures beyond its start and stop.
struct SteadyTree {
    start: f64,
    stop: f64,
    memory: Summary,
    idle_cpu: Summary,
    call: Summary,
    sample: Summary,
    first_sample: Summary,
}

/// [`fleet`] started once: start, memory, idle CPU, `calls` calls to one child, the monitor's samples, stop.
fn steady_tree(children: u32, calls: usize) -> SteadyTree {
    let rt = tokio();
    rt.block_on(async {
        let spec = fleet(children);
        let before = crate::heap::live_bytes();
        let t0 = Instant::now();
        let r = ringvisor::Runtime::start(compact_device(children), spec).await.expect("runtime");
        let start = elapsed_ns(t0);
        // The regions are mapped outside the heap: its growth is all host bookkeeping.
        let per_child = (crate::heap::live_bytes() - before) as f64 / f64::from(children);
        let idle = idle_share(Duration::from_secs(3)).await;
        let handle = r.gpu(&format!("fleet/c{}", children / 2)).expect("child");
        let payload = 1i64.to_le_bytes();
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls + calls / 10 {
            let t0 = Instant::now();
            handle.call(&payload, T).await.expect("call");
            if i >= calls / 10 {
                samples.push(elapsed_ns(t0));
            }
        }
        let mut monitor = ringvisor::app::monitor::Monitor::new(&r);
        let t0 = Instant::now();
        monitor.sample(&r).await;
        let first_sample = elapsed_ns(t0);
        let mut samples_steady = Vec::with_capacity(MONITOR_SAMPLES);
        for _ in 0..MONITOR_SAMPLES {
            let t0 = Instant::now();
            monitor.sample(&r).await;
            samples_steady.push(elapsed_ns(t0));
        }
        assert_eq!(monitor.listings_asked(), 2, "a steady tree: the top supervisor and the root, listed once");
        let t0 = Instant::now();
        r.shutdown().await;
        let stop = elapsed_ns(t0);
        let label = |what: &str| format!("ringvisor, {children} supervised GPU children, {what}");
        SteadyTree {
            start,
            stop,
            memory: Summary::of(&label("heap per child beyond regions"), vec![per_child], Unit::Bytes),
            idle_cpu: Summary::of(&label("idle, share of one core"), vec![idle], Unit::Ratio),
            call: Summary::of(&label("call to one"), samples, Unit::Nanos),
            sample: Summary::of(&label("monitor sample, steady"), samples_steady, Unit::Nanos),
            first_sample: Summary::of(
                &label("monitor's first sample (lists every child)"),
                vec![first_sample],
                Unit::Nanos,
            ),
        }
    })
}

/// The share of one core this process used over `window` (user + system time from `/proc/self/stat`;
/// Linux's clock tick is 1/100 s).
async fn idle_share(window: Duration) -> f64 {
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
        let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }
    // Let the start's stragglers (parked workers' last sweeps, the poller) settle first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ticks, t0) = (cpu_ticks(), Instant::now());
    tokio::time::sleep(window).await;
    (cpu_ticks() - ticks) as f64 / 100.0 / t0.elapsed().as_secs_f64()
}

struct Spawner(u32);
impl Actor for Spawner {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, myself: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        for _ in 0..self.0 {
            Actor::spawn_linked(None, ECHO, (), myself.get_cell()).await?;
        }
        Ok(())
    }
    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        _: ractor::SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(()) // a stopped child is expected: the baseline stops them
    }
}

/// The baseline of [`supervised_tree`]: one ractor actor that spawns `children` linked ractor actors (start),
/// and stops them and itself (stop); nanoseconds.
pub fn ractor_tree(children: u32) -> (f64, f64) {
    let rt = tokio();
    rt.block_on(async {
        let t0 = Instant::now();
        let (sup, handle) = Actor::spawn(None, Spawner(children), ()).await.expect("spawn");
        let start = elapsed_ns(t0);
        let t0 = Instant::now();
        sup.stop_children_and_wait(None, None).await;
        sup.stop_and_wait(None, None).await.expect("stop");
        handle.await.expect("join");
        (start, elapsed_ns(t0))
    })
}
