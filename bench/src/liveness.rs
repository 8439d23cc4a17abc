//! Block 0 under a burst, on the backend `RINGVISOR_BACKEND` names (`--only-liveness`): how often block 0 beats
//! on an idle grid, the longest its heartbeat stood still while a burst of pipelined creates went through (what
//! the loss detector must never mistake for a dead device), how long the burst took, and the round trip to an
//! idle actor afterwards. On CUDA each measurement runs once per idle pause of the actor blocks
//! (`CudaConfig::idle_backoff`): the pause trades the bus traffic of idle sweeps against an idle actor's wake-up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringvisor::device::{Backend, Device, DeviceConfig};

const T: Duration = Duration::from_secs(8);

/// One line per idle pause: idle beat rate, the burst's longest heartbeat gap and duration, the idle round trip,
/// with a command ring of `command_capacity` (a burst larger than the ring wraps it). On CUDA the automatic pause,
/// and with `contrast` also a fixed 262 µs one (the setting that starved block 0 on an H200: slow, tens of
/// seconds).
pub fn liveness_lines(slots: u32, creates: u32, command_capacity: u32, contrast: bool) -> Vec<String> {
    let base = Backend::from_env().unwrap_or_else(|e| panic!("RINGVISOR_BACKEND: {e}"));
    let pauses: &[Option<u64>] = if contrast { &[None, Some(262_144)] } else { &[None] };
    let variants: Vec<(String, Backend)> = match &base {
        Backend::Cuda(c) => pauses
            .iter()
            .copied()
            .map(|ns| {
                let mut c = c.clone();
                c.idle_backoff = ns.map(Duration::from_nanos);
                let label = ns.map_or("idle pause auto".to_string(), |ns| format!("idle pause {ns} ns"));
                (label, Backend::Cuda(c))
            })
            .collect(),
        other => vec![("default".to_string(), other.clone())],
    };
    variants
        .into_iter()
        .map(|(label, backend)| {
            let line =
                format!("{label}, command ring {command_capacity}: {}", one(backend, slots, creates, command_capacity));
            eprintln!("{line}");
            line
        })
        .collect()
}

fn one(backend: Backend, slots: u32, creates: u32, command_capacity: u32) -> String {
    let config =
        DeviceConfig::default().slots(slots).command_capacity(command_capacity).lost_after(None).backend(backend);
    let d = match Device::open(config) {
        Ok(d) => Arc::new(d),
        Err(e) => return format!("open failed: {e}"),
    };
    let described = d.describe();
    // idle beat rate
    let b0 = d.stats().block0_heartbeat;
    std::thread::sleep(Duration::from_millis(300));
    let idle_rate = (d.stats().block0_heartbeat - b0) as f64 / 0.3;
    // the longest gap between heartbeat changes while the burst runs, sampled every 200 µs
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (d, stop) = (d.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut last, mut since, mut longest) = (d.stats().block0_heartbeat, Instant::now(), Duration::ZERO);
            while !stop.load(Ordering::Acquire) {
                let beat = d.stats().block0_heartbeat;
                if beat != last {
                    longest = longest.max(since.elapsed());
                    (last, since) = (beat, Instant::now());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            longest.max(since.elapsed())
        })
    };
    let events = d.subscribe();
    let t0 = Instant::now();
    let pending: Vec<_> = (0..creates).map(|s| d.create(s, "echo", &[])).collect();
    let mut failed = None;
    for (slot, p) in (0..creates).zip(pending) {
        if let Err(e) = p.and_then(|p| p.wait_blocking(T)) {
            let stats = d.stats();
            let snap = d.snapshot(slot).map(|s| format!("{:?} generation {}", s.state, s.generation));
            // what block 0 answered: a rejection names the command's slot and why (a stale command cell read
            // again would be rejected as an illegal transition of a slot already created)
            let mut kinds = std::collections::BTreeMap::<String, (u32, Vec<u32>)>::new();
            while let Some(ev) = events.try_recv() {
                let entry = kinds.entry(format!("{:?} {:?}", ev.event.kind, ev.event.code)).or_default();
                entry.0 += 1;
                if entry.1.len() < 5 {
                    entry.1.push(ev.event.slot);
                }
            }
            failed = Some(format!(
                "create of slot {slot}: {e} (block 0: heartbeat {}, {} commands, {} events; the slot: {snap:?}; \
                 events by kind (count, first slots): {kinds:?})",
                stats.block0_heartbeat, stats.commands_processed, stats.events
            ));
            break;
        }
    }
    let burst = t0.elapsed();
    stop.store(true, Ordering::Release);
    let longest = sampler.join().unwrap_or_default();
    let mut rtt: Vec<u128> = Vec::new();
    if failed.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..200u32 {
            let slot = if i % 2 == 0 { 0 } else { creates - 1 };
            let t = Instant::now();
            if d.call(slot, &[1u8; 8], T).is_err() {
                break;
            }
            rtt.push(t.elapsed().as_nanos());
            std::thread::sleep(Duration::from_micros(500)); // the actor goes idle again between calls
        }
    }
    rtt.sort_unstable();
    let p50 = rtt.get(rtt.len() / 2).map_or("-".to_string(), |ns| format!("{:.1} µs", *ns as f64 / 1e3));
    d.shutdown();
    format!(
        "{described}: idle block 0 {idle_rate:.0} beats/s; {creates} creates in {burst:?}, longest heartbeat gap \
         {longest:?}; idle round trip p50 {p50}{}",
        failed.map_or(String::new(), |f| format!("; FAILED: {f}"))
    )
}
