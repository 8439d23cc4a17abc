//! Faults at a steady rate into a running tree: a [`ChaosTask`] draws a fault kind and a target among the
//! registered names matching a pattern from a seeded schedule (so a run replays), until stopped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringvisor_supervisor::{DeadLetterStats, Rounded, RunState, Services};

use super::monitor::Monitor;
use crate::faults::{ChaosSchedule, FaultInjector, InjectedFault};
use crate::Runtime;

/// Faults injected so far, by kind.
pub type FaultCounts = BTreeMap<&'static str, u64>;

/// A running fault loop.
pub struct ChaosTask {
    stop: Arc<AtomicBool>,
    counts: Arc<Mutex<FaultCounts>>,
    task: tokio::task::JoinHandle<()>,
}

impl ChaosTask {
    /// Every `every`, a fault among `kinds` into one of the names matching `pattern` (drawn with `seed`).
    /// A fault that does not apply to the drawn child (a supervisor fault on a worker) is not counted.
    pub fn spawn(services: Services, pattern: String, kinds: Vec<InjectedFault>, every: Duration, seed: u64) -> Self {
        let (stop, counts) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(FaultCounts::new())));
        let task = {
            let (stop, counts) = (stop.clone(), counts.clone());
            tokio::spawn(async move {
                let mut schedule = ChaosSchedule::new(seed, &kinds);
                let injector = FaultInjector::new(&services);
                let mut ticker = tokio::time::interval(every);
                ticker.tick().await; // the first tick is immediate: let the tree settle first
                loop {
                    ticker.tick().await;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let names: Vec<String> = services
                        .registry()
                        .find(&pattern)
                        .map(|f| f.into_iter().map(|(n, _)| n).collect())
                        .unwrap_or_default();
                    let Some((fault, target)) = schedule.next(names.len()) else { continue };
                    if let Ok(n) = injector.inject(&names[target], fault) {
                        if n > 0 {
                            *super::lock(&counts).entry(fault.label()).or_default() += 1;
                        }
                    }
                }
            })
        };
        Self { stop, counts, task }
    }

    /// Faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        super::lock(&self.counts).clone()
    }

    /// Stops injecting; returns what was injected.
    pub async fn stop(self) -> FaultCounts {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
        let counts = self.counts();
        let _ = self.task.await;
        counts
    }
}

/// The outcome of `ringvisor chaos`.
#[derive(Clone, Debug, Default)]
pub struct ChaosSummary {
    /// Faults injected, by kind.
    pub faults: FaultCounts,
    /// Restarts by supervisors.
    pub restarts: u64,
    /// Supervisors that exceeded their intensity.
    pub escalations: u64,
    /// Dead letters by reason.
    pub dead_letters: DeadLetterStats,
    /// How long after the last fault every child was running again (`None`: not within the bound).
    pub converged: Option<Duration>,
    /// Children still not running at the bound.
    pub not_running: Vec<String>,
}

impl ChaosSummary {
    /// The summary, as a table.
    pub fn table(&self) -> String {
        let mut t = String::from("| measure | value |\n|---|---|\n");
        for (k, v) in &self.faults {
            t += &format!("| faults: {k} | {v} |\n");
        }
        t += &format!("| restarts | {} |\n| escalations | {} |\n", self.restarts, self.escalations);
        t += &format!("| dead letters | {} |\n", self.dead_letters);
        match self.converged {
            Some(d) => t += &format!("| every child running again after the last fault | {} |\n", Rounded(d)),
            None => t += &format!("| not running at the bound | {} |\n", self.not_running.join(", ")),
        }
        t
    }
}

/// After the faults stop: waits (up to `bound`) until every child of the tree is running, and summarises.
pub async fn settle(rt: &Runtime, monitor: &mut Monitor, faults: FaultCounts, bound: Duration) -> ChaosSummary {
    let last_fault = Instant::now();
    let mut summary = ChaosSummary { faults, ..Default::default() };
    loop {
        let snap = monitor.sample(rt).await;
        let not_running: Vec<String> =
            snap.rows.iter().filter(|r| r.state != RunState::Running).map(|r| r.id.clone()).collect();
        if not_running.is_empty() {
            summary.converged = Some(last_fault.elapsed());
            break;
        }
        if last_fault.elapsed() > bound {
            summary.not_running = not_running;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (summary.restarts, summary.escalations) = monitor.counts();
    summary.dead_letters = rt.dead_letters().stats();
    summary
}
