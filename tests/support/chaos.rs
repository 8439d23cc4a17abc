//! The chaos harness: a tree of at least 200 GPU actors (counter and kv behaviours; one_for_one,
//! rest_for_one, one_for_all and simple_one_for_one supervisors) under seeded random faults while producers
//! call the actors; then the faults stop and the invariants are checked by the caller from the report.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringvisor::app::chaos::ChaosSummary;
use ringvisor::device::{DeviceConfig, DeviceError};
use ringvisor::faults::{ChaosSchedule, InjectedFault};
use ringvisor::prelude::*;
use ringvisor::supervisor::{DeadLetterStats, RunState, SendError, SupervisorRef, TreeEvent};

/// What to run.
pub struct ChaosConfig {
    pub seed: u64,
    pub duration: Duration,
    pub fault_every: Duration,
    pub producers: usize,
    /// Devices the tree runs on (256 slots shared among them). With one, losing it restarts the whole tree;
    /// with several, the last one is lost and only its children restart (on its replacement).
    pub devices: usize,
    /// Every GPU child mirrored by a ractor actor (`GpuChild::mirrored`).
    pub mirrored: bool,
}

/// What happened.
#[derive(Debug, Default)]
pub struct ChaosReport {
    pub faults: BTreeMap<&'static str, u64>,
    pub restarts: u64,
    pub escalations: u64,
    pub handed: u64,
    pub answered: u64,
    pub undelivered: u64,
    pub gone: u64,
    pub inbox_full: u64,
    pub timeouts: u64,
    /// For each call that timed out: its target and what the handle and the device said then.
    pub timeout_details: Vec<String>,
    /// Calls that failed because the device was lost (each is a dead letter).
    pub device_lost: u64,
    pub other_errors: Vec<String>,
    pub dead_letters: DeadLetterStats,
    pub converged: Option<Duration>,
    pub not_running: Vec<String>,
    /// What was still down 2 s after the last fault, if anything was.
    pub down_after_2s: String,
    pub free_slots_before: usize,
    pub free_slots_after: usize,
    /// Slots quarantined on the devices at the end.
    pub quarantined_after: usize,
    pub gpu_children: usize,
    /// Device restarts (the top supervisor's one_for_all).
    pub device_restarts: u64,
    /// GPU children that moved off a lost device (one of several) as they restarted.
    pub device_moves: u64,
    /// Devices replaced in place (one of several lost).
    pub devices_replaced: usize,
    /// Resident memory a quarter into the fault phase and at its end, bytes.
    pub rss_early: u64,
    pub rss_end: u64,
}

/// Resident set size of this process, bytes (0 where /proc is missing).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

impl ChaosReport {
    /// The summary table: the command's chaos summary (faults, restarts, escalations, dead letters,
    /// convergence), then what this harness adds (calls, slots, memory).
    pub fn table(&self) -> String {
        let summary = ChaosSummary {
            faults: self.faults.clone(),
            restarts: self.restarts,
            escalations: self.escalations,
            dead_letters: self.dead_letters.clone(),
            converged: self.converged,
            not_running: self.not_running.clone(),
        };
        let mut t = summary.table();
        t += &format!("| GPU children | {} |\n| device restarts | {} |\n", self.gpu_children, self.device_restarts);
        t += &format!(
            "| devices replaced / children moved off them | {} / {} |\n",
            self.devices_replaced, self.device_moves
        );
        t += &format!(
            "| calls handed | {} |\n| answered | {} |\n| undelivered (dead letter) | {} |\n| target gone (dead letter) | {} |\n| inbox full (dead letter) | {} |\n| device lost (dead letter) | {} |\n| timed out | {} |\n",
            self.handed, self.answered, self.undelivered, self.gone, self.inbox_full, self.device_lost, self.timeouts
        );
        t += &format!(
            "| free slots before / after (quarantined at the end) | {} / {} ({}) |\n",
            self.free_slots_before, self.free_slots_after, self.quarantined_after
        );
        t += &format!(
            "| resident memory early / end of faults | {} / {} MiB |\n",
            self.rss_early >> 20,
            self.rss_end >> 20
        );
        t
    }
}

/// A call's bound: long enough that no call times out under the heaviest chaos (a timed-out call could not
/// be classified as answered or dead-lettered).
const T: Duration = Duration::from_secs(30);

fn tree(mirrored: bool) -> SupervisorSpec {
    let sup = |strategy| SupervisorSpec::new(strategy).intensity(10_000, Duration::from_secs(1));
    // A short watchdog bound, so hangs injected near the end are caught soon after.
    // Mirrored: each mirror in a `pg` group, so it is spawned with its incarnation (one nothing else finds would
    // be spawned only when asked for, and the chaos never asks).
    let watched = |behaviour: &str| {
        let child = GpuChild::new(behaviour).heartbeat_timeout(Some(Duration::from_millis(200)));
        if mirrored {
            child.mirror_group("chaos.mirrors")
        } else {
            child.mirrored(false)
        }
    };
    // A short shutdown bound too: a group restart stops hung siblings, and a hung actor never drains.
    let gpu = |id: String, behaviour: &str, group: &str| {
        ChildSpec::gpu(id.clone(), watched(behaviour))
            .name(format!("chaos/{group}/{id}"))
            .shutdown(Shutdown::Timeout(Duration::from_millis(100)))
    };
    let counters = (0..80).fold(sup(Strategy::OneForOne), |s, i| s.child(gpu(format!("c{i}"), "counter", "counters")));
    let kv = (0..40).fold(sup(Strategy::RestForOne), |s, i| s.child(gpu(format!("k{i}"), "kv", "kv")));
    // The one_for_all group has a low intensity: under chaos it gives up, and its parent restarts it (escalation).
    let groups = (0..40).fold(SupervisorSpec::new(Strategy::OneForAll).intensity(1, Duration::from_secs(1)), |s, i| {
        s.child(gpu(format!("g{i}"), "counter", "groups"))
    });
    let pool = SupervisorSpec::simple(
        ChildSpec::gpu("p", watched("counter"))
            .name("chaos/pool/{id}")
            .shutdown(Shutdown::Timeout(Duration::from_millis(100))),
    )
    .intensity(10_000, Duration::from_secs(1));
    SupervisorSpec::new(Strategy::OneForOne)
        .intensity(100_000, Duration::from_secs(1))
        .child(ChildSpec::supervisor("counters", counters).name("chaos/counters"))
        .child(ChildSpec::supervisor("kv", kv).name("chaos/kv"))
        .child(ChildSpec::supervisor("groups", groups).name("chaos/groups"))
        .child(ChildSpec::supervisor("pool", pool).name("chaos/pool"))
}

fn kv_put(key: u64) -> Vec<u8> {
    let mut v = 1u32.to_le_bytes().to_vec();
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&key.to_le_bytes());
    v
}

#[derive(Default)]
struct Tally {
    handed: AtomicU64,
    answered: AtomicU64,
    undelivered: AtomicU64,
    gone: AtomicU64,
    inbox_full: AtomicU64,
    timeouts: AtomicU64,
    /// (target, when it was handed into the run, what the handle and the device said at the timeout)
    timeout_details: std::sync::Mutex<Vec<(String, Duration, String)>>,
    device_lost: AtomicU64,
    other: std::sync::Mutex<Vec<String>>,
}

/// What the handle and its device say about a child whose call waited out its deadline.
fn describe_stuck(actor: &ringvisor::supervisor::GpuActorRef) -> String {
    let (index, device, slot) = actor.location();
    format!(
        "device {index} slot {slot}: handle {:?}; device {:?}, host saw {:?}; quarantined {}; inbox pending {:?}; \
         device lost: {:?}; {:?}",
        actor.status(),
        device.lifecycle(slot).ok(),
        device.host_view(slot).ok(),
        device.is_quarantined(slot),
        device.inbox_pending(slot).ok(),
        device.loss_cause(),
        device.snapshot(slot).ok(),
    )
}

/// Every supervisor of the tree, with the GPU children it lists and whether each is running. A supervisor that
/// cannot be asked (its parent lists an incarnation that has just died) counts as not running: its children
/// are not counted, so the tree is not settled.
async fn walk(root: &SupervisorRef) -> (usize, Vec<String>) {
    let mut gpu = 0;
    let mut not_running = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(sup) = stack.pop() {
        let Ok(children) = sup.which_children().await else {
            not_running.push("a supervisor that does not answer".to_string());
            continue;
        };
        for c in children {
            if c.state != RunState::Running {
                not_running.push(format!("{} ({:?})", c.id, c.state));
            }
            if let Some(s) = SupervisorRef::from_child(&c.child) {
                stack.push(s);
            } else if c.child.gpu().is_some() {
                gpu += 1;
            }
        }
    }
    (gpu, not_running)
}

/// Runs the chaos scenario and reports.
pub async fn run(cfg: ChaosConfig) -> ChaosReport {
    let config = DeviceConfig::default()
        .slots(256 / cfg.devices as u32)
        .inbox_capacity(32)
        .outbox_capacity(32)
        .state_bytes(1024)
        .lost_after(Some(Duration::from_millis(500)));
    // Wedges fill the quarantine; past 24 slots the device restarts (and once per run it is lost outright).
    let rt = ringvisor::Runtime::builder()
        .devices(vec![config; cfg.devices])
        .root_id("chaos")
        .quarantine_limit(24)
        .device_restarts(1_000, Duration::from_secs(1))
        .start(tree(cfg.mirrored))
        .await
        .expect("tree starts");
    let pool = SupervisorRef::from_child(&rt.registry().lookup("chaos/pool").expect("pool")).expect("pool sup");
    for _ in 0..40 {
        pool.start_dynamic(Vec::new()).await.expect("pool child");
    }
    let mut report = ChaosReport { free_slots_before: rt.services().free_slots(), ..Default::default() };
    // Tree events are counted as they come (a soak must not queue them).
    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)));
    let mut events = rt.services().events().subscribe();
    let counter = {
        let counts = counts.clone();
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                match e {
                    TreeEvent::Restarting { supervisor, .. } if supervisor == ringvisor::TOP_SUPERVISOR => {
                        counts.2.fetch_add(1, Ordering::Relaxed)
                    }
                    TreeEvent::Restarting { .. } => counts.0.fetch_add(1, Ordering::Relaxed),
                    TreeEvent::IntensityReached { .. } => counts.1.fetch_add(1, Ordering::Relaxed),
                    TreeEvent::DeviceMoved { .. } => counts.3.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
            }
        })
    };
    let workers: Vec<String> = rt.find("chaos/*/*").expect("pattern").into_iter().map(|(n, _)| n).collect();
    let supervisors: Vec<String> = rt.find("chaos/*").expect("pattern").into_iter().map(|(n, _)| n).collect();
    assert!(workers.len() >= 200, "at least 200 GPU actors, found {}", workers.len());

    // Producers: calls through stable handles, looked up by name each time (a name outlives restarts).
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let run_start = Instant::now();
    let producers: Vec<_> = (0..cfg.producers)
        .map(|p| {
            let (stop, tally, names, services) = (stop.clone(), tally.clone(), workers.clone(), rt.services().clone());
            tokio::spawn(async move {
                let mut schedule = ChaosSchedule::new(cfg_seed_for(p), &[]);
                while !stop.load(Ordering::Relaxed) {
                    let name = &names[schedule.pick(names.len())];
                    let Some(actor) = services.registry().lookup(name).and_then(|c| c.gpu()) else {
                        tokio::task::yield_now().await;
                        continue; // a dynamic child gone with a killed pool: nothing handed
                    };
                    let payload = if name.starts_with("chaos/kv/") {
                        kv_put(schedule.pick(1000) as u64)
                    } else {
                        1i64.to_le_bytes().to_vec()
                    };
                    tally.handed.fetch_add(1, Ordering::Relaxed);
                    let handed = Instant::now();
                    let outcome = match actor.call(&payload, T).await {
                        // An error answer (a corrupt envelope) is an answer.
                        Ok(_) | Err(SendError::Device(DeviceError::ErrorReply { .. })) => &tally.answered,
                        Err(SendError::Undelivered { .. }) => &tally.undelivered,
                        // Gone, or its device shut down by a device restart: a dead letter either way.
                        Err(SendError::Gone { .. } | SendError::Device(DeviceError::Closed)) => &tally.gone,
                        Err(SendError::InboxFull) => &tally.inbox_full,
                        Err(SendError::Timeout) => {
                            let detail = (name.clone(), handed - run_start, describe_stuck(&actor));
                            tally.timeout_details.lock().unwrap().push(detail);
                            &tally.timeouts
                        }
                        Err(SendError::Device(DeviceError::DeviceLost)) => &tally.device_lost,
                        Err(e) => {
                            tally.other.lock().unwrap().push(e.to_string());
                            continue;
                        }
                    };
                    outcome.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    // Faults, from the seeded schedule; the last device is lost once, halfway (with one device, the loss
    // restarts the whole tree; with several, only that device's children restart).
    let devices_before = rt.devices();
    let kinds: Vec<_> = InjectedFault::ALL.into_iter().filter(|k| *k != InjectedFault::LoseDevice).collect();
    let mut schedule = ChaosSchedule::new(cfg.seed, &kinds);
    let started = Instant::now();
    let mut device_lost = false;
    let mut fault_log: Vec<(Duration, &'static str, String)> = Vec::new();
    while started.elapsed() < cfg.duration {
        if report.rss_early == 0 && started.elapsed() >= cfg.duration / 4 {
            report.rss_early = rss_bytes();
        }
        let (fault, _) = schedule.next(1).expect("kinds");
        if !device_lost && started.elapsed() >= cfg.duration / 2 {
            device_lost =
                rt.faults().inject_device_at(cfg.devices - 1, InjectedFault::LoseDevice).expect("device fault");
            if device_lost {
                *report.faults.entry(InjectedFault::LoseDevice.label()).or_default() += 1;
            }
        }
        let pool = if fault == InjectedFault::KillSupervisor { &supervisors } else { &workers };
        let target = &pool[schedule.pick(pool.len())];
        if let Ok(n) = rt.faults().inject(target, fault) {
            if n > 0 {
                *report.faults.entry(fault.label()).or_default() += 1;
                fault_log.push((run_start.elapsed(), fault.label(), target.clone()));
            }
        }
        tokio::time::sleep(cfg.fault_every).await;
    }
    let last_fault = Instant::now();
    report.rss_end = rss_bytes();
    // Convergence: every child every supervisor lists is running again.
    let deadline = last_fault + Duration::from_secs(20);
    let mut sampled = false;
    loop {
        let (_, not_running) = walk(rt.top()).await;
        if !sampled && last_fault.elapsed() >= Duration::from_secs(2) {
            // what is still down 2 s after the last fault (a slow convergence says who)
            sampled = true;
            let quarantined: Vec<Vec<u32>> = (0..cfg.devices).map(|i| rt.services().quarantined_slots_on(i)).collect();
            report.down_after_2s = format!(
                "{} children not running: {:?}; device health {:?}; quarantined {quarantined:?}",
                not_running.len(),
                not_running.iter().take(8).collect::<Vec<_>>(),
                rt.devices().iter().map(|d| d.health()).collect::<Vec<_>>(),
            );
        }
        if not_running.is_empty() {
            report.converged = Some(last_fault.elapsed());
            break;
        }
        if Instant::now() > deadline {
            report.not_running = not_running;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.expect("producer");
    }
    // The slots of children whose supervisor was killed or whose child ended for good come back once a
    // follow-up task has settled them (up to a heartbeat timeout for a wedged actor), and a supervisor killed at
    // the last fault may still be starting its children (up to a start timeout): wait for a tree that answers
    // and accounts for every slot, as long as convergence may take.
    let settle = Instant::now() + Duration::from_secs(20);
    loop {
        let (gpu_children, not_running) = walk(rt.top()).await;
        report.gpu_children = gpu_children;
        report.free_slots_after = rt.services().free_slots();
        report.quarantined_after = (0..cfg.devices).map(|i| rt.services().quarantined_slots_on(i).len()).sum();
        let accounted = report.free_slots_after + report.quarantined_after + gpu_children == 256;
        if (accounted && not_running.is_empty()) || Instant::now() > settle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    report.device_restarts = counts.2.load(Ordering::Relaxed);
    report.device_moves = counts.3.load(Ordering::Relaxed);
    report.devices_replaced =
        rt.devices().iter().zip(&devices_before).filter(|(now, was)| !now.same_device(was)).count();
    report.restarts = counts.0.load(Ordering::Relaxed);
    report.escalations = counts.1.load(Ordering::Relaxed);
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    report.handed = load(&tally.handed);
    report.answered = load(&tally.answered);
    report.undelivered = load(&tally.undelivered);
    report.gone = load(&tally.gone);
    report.inbox_full = load(&tally.inbox_full);
    report.timeouts = load(&tally.timeouts);
    // each timeout with the faults aimed at its child or its supervisor from a second before it was handed on
    for (name, handed, detail) in tally.timeout_details.lock().unwrap().iter() {
        let supervisor = name.rsplit_once('/').map_or("", |(s, _)| s);
        let near: Vec<String> = fault_log
            .iter()
            .filter(|(at, _, target)| {
                *at + Duration::from_secs(1) >= *handed && (target == name || target == supervisor)
            })
            .map(|(at, fault, target)| format!("{fault} on {target} at {at:?}"))
            .collect();
        report.timeout_details.push(format!("{name}, handed at {handed:?}: {detail}; faults since: {near:?}"));
    }
    report.device_lost = load(&tally.device_lost);
    report.other_errors = tally.other.lock().unwrap().clone();
    report.dead_letters = rt.dead_letters().stats();
    rt.shutdown().await;
    counter.abort();
    report
}

fn cfg_seed_for(producer: usize) -> u64 {
    0x5EED_0000 + producer as u64
}
