//! The demo: a fleet of `sensor` actors on a running device, each keeping a running mean and variance of
//! its stream and reporting anomalies (z-score past a threshold) to an `alerts` actor by kernel-to-kernel
//! messages; a load generator feeding them synthetic readings with planted anomalies; a fault injected into
//! a random sensor every second. At the end every reading is accounted for (processed by a sensor, or a dead
//! letter with its reason), and every planted anomaly too (detected, missed while its sensor warmed up after
//! a restart, or a dead letter).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ringvisor_device::{DeviceConfig, EventKind, SlotEvent, Stream};
use ringvisor_supervisor::{
    ChildSpec, DeadLetterStats, DeadLetters, GpuActorRef, GpuChild, OverflowPolicy, Strategy, SupervisorSpec,
};

use super::chaos::{ChaosTask, FaultCounts};
use crate::faults::InjectedFault;
use crate::{Runtime, RuntimeError};

/// What to run.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Sensor actors (at least 1).
    pub sensors: u32,
    /// Readings per second per sensor.
    pub rate: u32,
    /// One planted anomaly per this many readings (per sensor, on average).
    pub anomaly_every: u32,
    /// Time between two injected faults (`None`: no chaos).
    pub chaos_every: Option<Duration>,
    /// Seed of the readings, the planted anomalies and the faults.
    pub seed: u64,
    /// Readings a sensor needs before it scores (after every (re)start).
    pub warmup: u32,
    /// The z-score past which a reading is an anomaly.
    pub threshold: f64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            sensors: 256,
            rate: 200,
            anomaly_every: 500,
            chaos_every: Some(Duration::from_secs(1)),
            seed: 42,
            warmup: 32,
            threshold: 6.0,
        }
    }
}

/// The faults the demo injects (one at a time, into a random sensor).
pub const DEMO_FAULTS: [InjectedFault; 5] = [
    InjectedFault::CrashNextMessage,
    InjectedFault::KillDeviceActor,
    InjectedFault::KillActor,
    InjectedFault::Hang(None),
    InjectedFault::Wedge,
];

/// The registry name of the alert aggregator.
pub const ALERTS: &str = "demo/alerts";
/// The registry pattern of the sensors.
pub const SENSORS: &str = "demo/sensors/*";

/// What the load generator counted.
#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    planted: AtomicU64,
    refused: AtomicU64,
    skipped: AtomicU64,
}

/// What the sensors processed, summed over their incarnations from the device's own events.
#[derive(Default)]
struct Processed {
    /// Per slot: the generation whose count has been taken, and the running sum.
    settled: Mutex<(BTreeMap<u32, u32>, u64)>,
}

impl Processed {
    /// An event that ends an incarnation (or starts one, reporting the previous one) settles its count once.
    fn record(&self, e: &SlotEvent) {
        let ev = &e.event;
        let ended = match ev.kind {
            EventKind::Failed
            | EventKind::Killed
            | EventKind::Drained
            | EventKind::DeviceLost
            | EventKind::DeviceStopped
            | EventKind::Quarantined => ev.generation,
            EventKind::Created | EventKind::Restarted | EventKind::CreateFailed => ev.generation.saturating_sub(1),
            _ => return,
        };
        if ended == 0 {
            return;
        }
        let mut s = super::lock(&self.settled);
        let done = s.0.get(&ev.slot).copied().unwrap_or(0);
        if ended > done {
            s.0.insert(ev.slot, ended);
            s.1 += ev.messages_processed;
        }
    }

    fn total(&self) -> u64 {
        super::lock(&self.settled).1
    }
}

/// The demo's outcome.
#[derive(Clone, Debug, Default)]
pub struct DemoSummary {
    /// How long the load ran.
    pub elapsed: Duration,
    /// Sensors in the fleet.
    pub sensors: u32,
    /// Readings handed to sensors.
    pub readings: u64,
    /// Readings the sensors processed (summed over incarnations from the device's events).
    pub processed: u64,
    /// Readings not handed over because a sensor's inbox was full (back-pressure; never sent).
    pub skipped: u64,
    /// Anomalies planted among the readings handed over.
    pub planted: u64,
    /// Planted anomalies the sensors flagged.
    pub detected: u64,
    /// Anomalies flagged that were not planted.
    pub false_alarms: u64,
    /// Planted anomalies a sensor saw while warming up after a (re)start.
    pub missed_warmup: u64,
    /// Planted anomalies within a sensor's threshold.
    pub missed_below: u64,
    /// Planted anomalies that are dead letters (their sensor crashed, was killed, or its slot quarantined).
    pub planted_dead_lettered: u64,
    /// Faults injected, by kind.
    pub faults: FaultCounts,
    /// Restarts by supervisors.
    pub restarts: u64,
    /// Supervisors that exceeded their intensity.
    pub escalations: u64,
    /// Dead letters by reason.
    pub dead_letters: DeadLetterStats,
    /// Readings neither processed nor dead letters (must be 0).
    pub lost: i64,
    /// Planted anomalies not accounted for (must be 0).
    pub planted_unaccounted: i64,
}

impl DemoSummary {
    /// Nothing was lost: every reading and every planted anomaly is accounted for.
    pub fn nothing_lost(&self) -> bool {
        self.lost == 0 && self.planted_unaccounted == 0
    }
}

/// A running demo.
pub struct Demo {
    rt: Runtime,
    config: DemoConfig,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    processed: Arc<Processed>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    chaos: Option<ChaosTask>,
    started: Instant,
}

fn sensor_init(alert_slot: u32, warmup: u32, threshold: f64) -> Vec<u8> {
    let mut v = alert_slot.to_le_bytes().to_vec();
    v.extend_from_slice(&warmup.to_le_bytes());
    v.extend_from_slice(&threshold.to_le_bytes());
    v
}

/// A reading as the `sensor` behaviour takes it.
fn reading(value: f64, planted: bool, seq: u32) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&value.to_le_bytes());
    r[8..12].copy_from_slice(&u32::from(planted).to_le_bytes());
    r[12..].copy_from_slice(&seq.to_le_bytes());
    r
}

fn is_planted(payload: &[u8]) -> bool {
    payload.len() >= 12 && payload[8] & 1 == 1
}

/// The demo's tree: the aggregator in slot 0, and the sensors under their own one_for_one supervisor.
pub fn demo_tree(config: &DemoConfig) -> SupervisorSpec {
    let sensor = GpuChild::new("sensor").init(sensor_init(0, config.warmup, config.threshold));
    let sensors = (0..config.sensors)
        .fold(SupervisorSpec::new(Strategy::OneForOne).intensity(1_000, Duration::from_secs(1)), |s, i| {
            s.child(ChildSpec::gpu(format!("s{i}"), sensor.clone()).name(format!("demo/sensors/s{i}")))
        });
    SupervisorSpec::new(Strategy::OneForOne)
        .intensity(10, Duration::from_secs(10))
        .child(ChildSpec::gpu("alerts", GpuChild::new("alerts").slot(0)).name(ALERTS))
        .child(ChildSpec::supervisor("sensors", sensors).name("demo/sensors"))
}

impl Demo {
    /// Opens the device (CPU backend by default), starts the tree and the load, and the chaos if asked.
    pub async fn start(config: DemoConfig, device: DeviceConfig) -> Result<Demo, RuntimeError> {
        // Room for every slot plus a quarantined few, and a dead-letter queue that keeps every letter of a
        // demo run (the planted anomalies among them are counted at the end).
        let slots = (config.sensors + 1).next_power_of_two().max(config.sensors + 17);
        let device = DeviceConfig { slots, k2k_capacity: device.k2k_capacity.max(64), ..device };
        let rt = Runtime::builder()
            .device(device)
            .root_id("demo")
            .dead_letters(DeadLetters::new(1 << 20, OverflowPolicy::DropOldest))
            .start(demo_tree(&config))
            .await?;
        let processed = Arc::new(Processed::default());
        let events = rt.device().subscribe();
        let mut tasks = vec![tokio::spawn(count_processed(events, processed.clone()))];
        let sensors: Vec<GpuActorRef> = rt
            .find(SENSORS)
            .map_err(|e| RuntimeError::Supervisor(e.into()))?
            .into_iter()
            .filter_map(|(_, c)| c.gpu())
            .collect();
        let (stop, counters) = (Arc::new(AtomicBool::new(false)), Arc::new(Counters::default()));
        tasks.push(tokio::spawn(generate(sensors, config.clone(), stop.clone(), counters.clone())));
        let chaos = config.chaos_every.map(|every| {
            ChaosTask::spawn(rt.services().clone(), SENSORS.into(), DEMO_FAULTS.to_vec(), every, config.seed)
        });
        Ok(Demo { rt, config, stop, counters, processed, tasks, chaos, started: Instant::now() })
    }

    /// The runtime the demo runs on (to watch it).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Stops the load and the faults, waits until the sensors have processed what they hold, reads the
    /// aggregator, shuts the tree down in order (reverse start order, shutdown specs honoured), and accounts
    /// for every reading. `restarts` and `escalations` are what the caller's monitor counted.
    pub async fn finish(self, restarts: u64, escalations: u64) -> Result<DemoSummary, String> {
        let Demo { rt, config, stop, counters, processed, mut tasks, chaos, started } = self;
        let faults = match chaos {
            Some(c) => c.stop().await,
            None => Default::default(),
        };
        stop.store(true, Ordering::Relaxed);
        let elapsed = started.elapsed();
        let counter_task = tasks.remove(0);
        for t in tasks {
            let _ = t.await;
        }
        quiesce(&rt).await;
        let alerts = rt.gpu(ALERTS).ok_or("the alert aggregator is not registered")?;
        let [_, detected, false_alarms, missed_warmup, missed_below, _] = read_totals(&alerts).await?;
        let dead_letters = rt.dead_letters().clone();
        // The sensors' last processed counts arrive with the drains of the ordered shutdown.
        rt.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), counter_task).await;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let stats = dead_letters.stats();
        let planted_dead_lettered = dead_letters.snapshot().iter().filter(|l| is_planted(&l.payload)).count() as u64;
        let readings = load(&counters.accepted) + load(&counters.refused);
        let planted = load(&counters.planted);
        let processed = processed.total();
        Ok(DemoSummary {
            elapsed,
            sensors: config.sensors,
            readings,
            processed,
            skipped: load(&counters.skipped),
            planted,
            detected,
            false_alarms,
            missed_warmup,
            missed_below,
            planted_dead_lettered,
            faults,
            restarts,
            escalations,
            lost: readings as i64 - processed as i64 - stats.total() as i64,
            planted_unaccounted: planted as i64
                - (detected + missed_warmup + missed_below + planted_dead_lettered) as i64,
            dead_letters: stats,
        })
    }
}

/// Waits (up to 5 s) until no sensor has messages queued and every child is running.
async fn quiesce(rt: &Runtime) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let device = rt.device();
        let busy = rt.find(SENSORS).map(|found| {
            found.iter().filter_map(|(_, c)| c.gpu()).any(|g| {
                g.status() != ringvisor_supervisor::ChildStatus::Running
                    || device.snapshot(g.slot()).is_ok_and(|s| s.inbox.0 != s.inbox.1)
            })
        });
        if busy == Ok(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The aggregator's totals, once two reads 50 ms apart agree (kernel-to-kernel alerts in flight land).
async fn read_totals(alerts: &GpuActorRef) -> Result<[u64; 6], String> {
    let read = || async {
        let reply = alerts.call(&[], Duration::from_secs(5)).await.map_err(|e| format!("alerts: {e}"))?;
        reply.decode::<[u64; 6]>().map_err(|e| format!("alerts: {e}"))
    };
    let mut last = read().await?;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = read().await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// Sums what sensor slots processed, from the device's events (slot 0 is the aggregator).
async fn count_processed(events: Stream<SlotEvent>, processed: Arc<Processed>) {
    while let Some(e) = events.recv().await {
        if e.event.slot != 0 {
            processed.record(&e);
        }
    }
}

/// The load generator: every 10 ms, a batch of readings per sensor (normal noise around a per-sensor
/// level, one planted anomaly per `anomaly_every` readings on average).
async fn generate(sensors: Vec<GpuActorRef>, config: DemoConfig, stop: Arc<AtomicBool>, counters: Arc<Counters>) {
    const TICK: Duration = Duration::from_millis(10);
    let mut rng = StdRng::seed_from_u64(config.seed);
    let per_tick = (config.rate as f64 * TICK.as_secs_f64()).max(1.0) as usize;
    let levels: Vec<f64> = (0..sensors.len()).map(|_| rng.gen_range(10.0..100.0)).collect();
    let mut seq = 0u32;
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut batch: Vec<[u8; 16]> = Vec::with_capacity(per_tick);
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        for (sensor, level) in sensors.iter().zip(&levels) {
            batch.clear();
            let mut planted = Vec::with_capacity(per_tick);
            for _ in 0..per_tick {
                seq = seq.wrapping_add(1);
                let plant = rng.gen_range(0..config.anomaly_every.max(1)) == 0;
                let noise: f64 = (0..4).map(|_| rng.gen_range(-1.0..1.0)).sum::<f64>() * 0.87; // ~N(0, 1)
                let value = if plant {
                    let sign = if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
                    level + sign * rng.gen_range(20.0..40.0)
                } else {
                    level + noise
                };
                batch.push(reading(value, plant, seq));
                planted.push(plant);
            }
            let accepted = match sensor.send_batch(&batch) {
                Ok(n) => n,
                Err(_) => {
                    // Gone for good: every reading of the batch is a dead letter.
                    counters.refused.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    let n = planted.iter().filter(|p| **p).count() as u64;
                    counters.planted.fetch_add(n, Ordering::Relaxed);
                    continue;
                }
            };
            counters.accepted.fetch_add(accepted as u64, Ordering::Relaxed);
            counters.skipped.fetch_add((batch.len() - accepted) as u64, Ordering::Relaxed);
            let n = planted[..accepted].iter().filter(|p| **p).count() as u64;
            counters.planted.fetch_add(n, Ordering::Relaxed);
        }
    }
}
