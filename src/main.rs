//! `ringvisor`: the command-line entry point.
//!
//! `ringvisor demo [--duration SECS] [--actors N]` runs the main job on the CPU backend: counter actors on a
//! running device, two producers sending, a crash injected into a random actor every 100 ms and the actor
//! restarted by a minimal host-side restart loop, then a summary that accounts for every message.
//! (The full supervision tree, live view and chaos commands come with the supervisor.)

use ringvisor::device::{Device, DeviceConfig, DeviceError, EventKind, Fault};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    duration: Duration,
    actors: u32,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args { duration: Duration::from_secs(10), actors: 256 };
    match it.next().as_deref() {
        Some("demo") => {}
        Some(other) => return Err(format!("unknown command `{other}`")),
        None => return Err("missing command".into()),
    }
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--duration" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--duration: {e}"))?;
                if !(secs > 0.0 && secs < 86_400.0) {
                    return Err("--duration must be between 0 and 86400 seconds".into());
                }
                args.duration = Duration::from_secs_f64(secs);
            }
            "--actors" => {
                args.actors = value()?.parse().map_err(|e| format!("--actors: {e}"))?;
                if args.actors < 2 {
                    return Err("--actors must be at least 2".into());
                }
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    Ok(args)
}

fn main() {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\nusage: ringvisor demo [--duration SECS] [--actors N]");
            std::process::exit(2);
        }
    };
    if let Err(e) = demo(args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn demo(args: Args) -> Result<(), DeviceError> {
    let device = Device::open(DeviceConfig::default().slots(args.actors))?;
    println!("ringvisor demo: {} counter actors on {}", args.actors, device.describe());
    let events = device.subscribe();
    for s in 0..args.actors {
        device.create(s, "counter", &[])?.wait_blocking(Duration::from_secs(5))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..2u32)
        .map(|p| {
            let (d, stop, n) = (device.clone(), stop.clone(), args.actors);
            std::thread::spawn(move || {
                let mut sent = HashSet::new();
                let mut i = p;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    if let Ok(id) = d.post(i % n, &1i64.to_le_bytes(), Duration::from_millis(5)) {
                        sent.insert(id);
                    }
                }
                sent
            })
        })
        .collect();
    let started = Instant::now();
    let (mut crashes, mut restarts, mut answered) = (0u64, 0u64, HashSet::new());
    let mut undelivered = HashSet::new();
    let mut next_fault = Instant::now();
    let mut seed = 0x9E37_79B9u32;
    while started.elapsed() < args.duration {
        if Instant::now() >= next_fault {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            device.inject(seed % args.actors, Fault::CrashNextMessage)?;
            crashes += 1;
            next_fault += Duration::from_millis(100);
        }
        while let Some(e) = events.try_recv() {
            undelivered.extend(e.undelivered.iter().map(|u| u.envelope.correlation));
            if e.event.kind == EventKind::Failed {
                // the minimal restart loop: every failed actor is restarted at once
                device.restart(e.event.slot, "counter", &[])?;
                restarts += 1;
            }
        }
        // bounded: producers may outpace this loop
        for _ in 0..100_000 {
            let Some(r) = device.replies().try_recv() else { break };
            answered.insert(r.correlation);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sent: HashSet<u64> = producers.into_iter().flat_map(|p| p.join().expect("producer")).collect();
    // settle: drain every actor so queued messages are processed or handed back
    for s in 0..args.actors {
        loop {
            match device.drain_and_wait(s, Duration::from_secs(5)) {
                Ok(e) if e.event.kind == EventKind::Drained => {
                    undelivered.extend(e.undelivered.iter().map(|u| u.envelope.correlation));
                    break;
                }
                Ok(e) => undelivered.extend(e.undelivered.iter().map(|u| u.envelope.correlation)),
                Err(DeviceError::Rejected { .. }) | Err(DeviceError::CommandInFlight { .. }) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(e),
            }
            while let Some(e) = events.try_recv() {
                undelivered.extend(e.undelivered.iter().map(|u| u.envelope.correlation));
                if e.event.kind == EventKind::Failed {
                    let _ = device.restart(e.event.slot, "counter", &[]);
                    restarts += 1;
                }
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while answered.len() + undelivered.len() < sent.len() && Instant::now() < deadline {
        while let Some(r) = device.replies().try_recv() {
            answered.insert(r.correlation);
        }
        while let Some(e) = events.try_recv() {
            undelivered.extend(e.undelivered.iter().map(|u| u.envelope.correlation));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let lost = sent.iter().filter(|c| !answered.contains(c) && !undelivered.contains(c)).count();
    let stats = device.stats();
    println!("ran {:.1} s", elapsed);
    println!("messages sent          {:>10}  ({:.0}/s)", sent.len(), sent.len() as f64 / elapsed);
    println!("answered               {:>10}", answered.len());
    println!(
        "handed back            {:>10}  ({} left in inbox, {} in flight at crash)",
        undelivered.len(),
        stats.undelivered_left_in_inbox,
        stats.undelivered_in_flight
    );
    println!("crashes injected       {:>10}", crashes);
    println!("restarts               {:>10}", restarts);
    println!("unaccounted            {:>10}", lost);
    device.shutdown();
    if lost > 0 {
        return Err(DeviceError::InvalidConfig(format!("{lost} messages unaccounted for")));
    }
    println!("every message was answered or handed back: nothing lost");
    Ok(())
}
