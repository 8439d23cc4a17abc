//! Kill / restart / drain / crash cycles while two host threads keep sending: no message is lost or
//! duplicated. Every message the host accepted is, exactly once, answered or handed back as undelivered.
//!
//! This is also the concurrency stress test that CI runs with the kernel code built under ThreadSanitizer
//! (`RINGVISOR_KERNEL_SANITIZER=thread`, see `.ci/run`). `RINGVISOR_CHURN_SEED` and
//! `RINGVISOR_CHURN_ROUNDS` override the defaults.

use rand::{rngs::StdRng, Rng, SeedableRng};
use ringvisor::device::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLOTS: u32 = 32;
const T: Duration = Duration::from_secs(30);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Brings `slot` back to Active whatever state it is in.
fn revive(d: &Device, slot: u32) {
    for _ in 0..100 {
        let res = match d.host_view(slot).unwrap().1 {
            SlotState::Active => return,
            SlotState::Dormant | SlotState::Terminated => d.create(slot, "test", &[]),
            _ => d.restart(slot, "test", &[]),
        };
        match res.map(|p| p.wait_blocking(T)) {
            Ok(Ok(_)) | Ok(Err(DeviceError::Rejected { .. })) | Err(DeviceError::CommandInFlight { .. }) => {}
            other => panic!("revive {slot}: {other:?}"),
        }
    }
    panic!("slot {slot} could not be revived");
}

#[test]
fn churn_under_load_loses_and_duplicates_nothing_on_the_cpu_backend() {
    churn_under_load_loses_and_duplicates_nothing(Backend::Cpu(Default::default()));
}

#[test]
fn churn_under_load_loses_and_duplicates_nothing_on_the_emulated_cuda_driver() {
    churn_under_load_loses_and_duplicates_nothing(Backend::cuda_emulated(EmulatedGpu::default()));
}

fn churn_under_load_loses_and_duplicates_nothing(backend: Backend) {
    let seed = env_u64("RINGVISOR_CHURN_SEED", 7);
    let rounds = env_u64("RINGVISOR_CHURN_ROUNDS", 300);
    let config = DeviceConfig::default().slots(SLOTS).inbox_capacity(16).k2k_capacity(16).backend(backend);
    let device = Device::open(config).unwrap();
    let events = device.subscribe();
    for s in 0..SLOTS {
        device.create(s, "test", &[]).unwrap().wait_blocking(T).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..2u64)
        .map(|p| {
            let d = device.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 1000 + p);
                let mut accepted = HashSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let slot = rng.gen_range(0..SLOTS);
                    // echo directly, or forward to another slot which answers (kernel-to-kernel)
                    let mut msg = Vec::new();
                    if rng.gen_bool(0.2) {
                        msg.extend_from_slice(&4u32.to_le_bytes());
                        msg.extend_from_slice(&rng.gen_range(0..SLOTS).to_le_bytes());
                    }
                    msg.extend_from_slice(&1u32.to_le_bytes());
                    msg.extend_from_slice(&[0u8; 12]);
                    match d.post(slot, &msg, Duration::from_millis(2)) {
                        Ok(id) => assert!(accepted.insert(id)),
                        Err(DeviceError::NotAccepting { .. }) | Err(DeviceError::InboxFull { .. }) => {}
                        Err(e) => panic!("post: {e}"),
                    }
                }
                accepted
            })
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..rounds {
        let slot = rng.gen_range(0..SLOTS);
        let outcome = match rng.gen_range(0..5) {
            0 => device.restart(slot, "test", &[]).map(|p| p.wait_blocking(T).map(|_| ())),
            1 => device.kill(slot).map(|p| p.wait_blocking(T).map(|_| ())),
            2 => device.drain(slot).map(|p| p.wait_blocking(T).map(|_| ())),
            3 => device.inject(slot, SlotFault::CrashNextMessage).map(Ok),
            _ => {
                let stall = rng.gen_bool(0.5);
                device.inject(slot, if stall { SlotFault::Stall } else { SlotFault::ClearStall }).map(Ok)
            }
        };
        match outcome {
            Ok(Ok(())) | Ok(Err(DeviceError::Rejected { .. })) | Err(DeviceError::Rejected { .. }) => {}
            Err(DeviceError::CommandInFlight { .. }) => {}
            other => panic!("chaos op on slot {slot}: {other:?}"),
        }
        if rng.gen_bool(0.5) {
            revive(&device, slot);
        }
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..300)));
    }
    stop.store(true, Ordering::Relaxed);
    let accepted: Vec<HashSet<u64>> = producers.into_iter().map(|p| p.join().unwrap()).collect();
    let sent: HashSet<u64> = accepted.iter().flatten().copied().collect();
    assert_eq!(sent.len(), accepted.iter().map(|a| a.len()).sum::<usize>(), "correlation ids are unique");

    // Let everything settle: clear stalls, revive, then drain every slot (which finishes all queued work).
    for s in 0..SLOTS {
        device.inject(s, SlotFault::ClearStall).unwrap();
        revive(&device, s);
    }
    for s in 0..SLOTS {
        // a crash injected earlier may still fire on the next message: drain until it ends cleanly
        for attempt in 0.. {
            assert!(attempt < 100, "slot {s} never drained");
            revive(&device, s);
            match device.drain_and_wait(s, T) {
                Ok(e) if e.event.kind == EventKind::Drained => break,
                Ok(_) | Err(DeviceError::Rejected { .. }) => continue,
                Err(e) => panic!("final drain of {s}: {e}"),
            }
        }
    }
    let mut answered = HashSet::new();
    let mut undelivered = HashSet::new();
    let mut answered_by = std::collections::HashMap::new();
    let mut undelivered_by = std::collections::HashMap::new();
    let deadline = Instant::now() + T;
    while answered.len() + undelivered.len() < sent.len() && Instant::now() < deadline {
        while let Some(r) = device.replies().try_recv() {
            assert!(answered.insert(r.correlation), "duplicate reply {}", r.correlation);
            answered_by.insert(r.correlation, format!("{:?}", r));
        }
        while let Some(e) = events.try_recv() {
            for u in e.undelivered {
                undelivered_by.insert(u.envelope.correlation, format!("{:?} {:?}", u, e.event));
                assert!(undelivered.insert(u.envelope.correlation), "reported undelivered twice");
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let both: Vec<_> = answered.intersection(&undelivered).collect();
    for c in &both {
        eprintln!("BOTH {c}: answered {} / undelivered {}", answered_by[c], undelivered_by[c]);
    }
    assert!(both.is_empty(), "{} messages both answered and undelivered", both.len());
    let unknown: Vec<_> = answered.union(&undelivered).filter(|c| !sent.contains(c)).collect();
    assert!(unknown.is_empty(), "replies for messages never sent: {unknown:?}");
    let missing: Vec<_> = sent.iter().filter(|c| !answered.contains(c) && !undelivered.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} messages unaccounted for, e.g. {:?}",
        missing.len(),
        sent.len(),
        &missing[..missing.len().min(5)]
    );
    let stats = device.stats();
    eprintln!(
        "seed {seed}: {} sent, {} answered, {} undelivered ({} left in inbox, {} in flight at crash), {} events",
        sent.len(),
        answered.len(),
        undelivered.len(),
        stats.undelivered_left_in_inbox,
        stats.undelivered_in_flight,
        stats.events
    );
    assert!(!undelivered.is_empty() && !answered.is_empty(), "the run exercised both outcomes");
}
