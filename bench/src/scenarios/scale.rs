//! Scale: creating GPU actors against spawning ractor actors, and pattern lookups in the registry against a scan.

use std::time::Instant;

use ractor::Actor;
use ringvisor::device::{Device, DeviceConfig};
use ringvisor::supervisor::{ChildRef, Registry};

use super::{elapsed_ns, tokio, ECHO, T};
use crate::stats::{Summary, Unit};

/// Creating `slots` GPU actors (device open + one Create per slot through block 0): time, and heap memory
/// per slot beyond the device regions (rings, control blocks, state): the host-side bookkeeping.
pub fn create_slots(slots: u32) -> (Summary, Summary) {
    let before = crate::heap::live_bytes();
    let t0 = Instant::now();
    let config =
        DeviceConfig::default().slots(slots).inbox_capacity(4).outbox_capacity(4).k2k_capacity(2).state_bytes(64);
    let device = Device::open(config).expect("device");
    let mut pending = Vec::with_capacity(slots as usize);
    for s in 0..slots {
        pending.push(device.create(s, "counter", &[]).expect("create"));
    }
    for p in pending {
        p.wait_blocking(T).expect("created");
    }
    let time = elapsed_ns(t0);
    // The CPU backend maps its regions outside the heap: the heap's growth is all host bookkeeping.
    let beyond = (crate::heap::live_bytes() - before) as f64 / f64::from(slots);
    device.shutdown();
    (
        Summary::of(&format!("ringvisor, {slots} slots created"), vec![time], Unit::Nanos),
        Summary::of("ringvisor, memory per slot beyond regions", vec![beyond], Unit::Bytes),
    )
}

/// Spawning `n` idle ractor actors: time and heap memory per actor.
pub fn spawn_ractor_actors(n: u32) -> (Summary, Summary) {
    let rt = tokio();
    let before = crate::heap::live_bytes();
    let t0 = Instant::now();
    let actors = rt.block_on(async {
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(Actor::spawn(None, ECHO, ()).await.expect("spawn").0);
        }
        v
    });
    let time = elapsed_ns(t0);
    let per = (crate::heap::live_bytes() - before) as f64 / f64::from(n);
    for a in &actors {
        a.stop(None);
    }
    (
        Summary::of(&format!("ractor, {n} actors spawned"), vec![time], Unit::Nanos),
        Summary::of("ractor, memory per actor", vec![per], Unit::Bytes),
    )
}

// ---------- registry ----------

/// The baseline's matcher: `*` (a whole segment, or a trailing `*` after a literal prefix) and `?`.
fn glob_segment(pattern: &str, seg: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => seg.starts_with(prefix),
        None => pattern.len() == seg.len() && pattern.chars().zip(seg.chars()).all(|(p, c)| p == '?' || p == c),
    }
}

/// Pattern lookups among 100,000 names (`fleet/g0/s0` to `fleet/g99/s999`), one registry for every case:
/// for each `(pattern, expected matches)`, the registry's lookup and a linear scan of the names.
pub fn registry_lookups(n: usize, cases: &[(&str, usize)]) -> Vec<(Summary, Summary, Summary)> {
    let rt = tokio();
    let registry = Registry::new();
    let cell = rt.block_on(async { Actor::spawn(None, ECHO, ()).await.expect("spawn").0.get_cell() });
    let mut names = Vec::with_capacity(100_000);
    for g in 0..100 {
        for s in 0..1000 {
            let name = format!("fleet/g{g}/s{s}");
            registry.bind(&name, ChildRef::unsupervised(name.clone(), cell.clone())).expect("bind");
            names.push(name);
        }
    }
    let scan = |pattern: &str| {
        let pat: Vec<&str> = pattern.split('/').collect();
        names
            .iter()
            .filter(|name| {
                let segs: Vec<&str> = name.split('/').collect();
                segs.len() == pat.len() && segs.iter().zip(&pat).all(|(s, p)| glob_segment(p, s))
            })
            .count()
    };
    let time = |count: usize, lookup: &dyn Fn() -> usize, expected: usize| -> Vec<f64> {
        (0..count)
            .map(|_| {
                let t0 = Instant::now();
                assert_eq!(lookup(), expected);
                elapsed_ns(t0)
            })
            .collect()
    };
    cases
        .iter()
        .map(|&(pattern, expected)| {
            assert_eq!(registry.find(pattern).expect("find").len(), expected);
            let found = time(n, &|| registry.find(pattern).expect("find").len(), expected);
            let visited = time(n, &|| registry.for_each_match(pattern, |_, _| {}).expect("visit"), expected);
            let scanned = time((n / 50).max(50), &|| scan(pattern), expected);
            (
                Summary::of("registry pattern lookup (find)", found, Unit::Nanos),
                Summary::of("registry pattern visit (for_each_match)", visited, Unit::Nanos),
                Summary::of("linear scan", scanned, Unit::Nanos),
            )
        })
        .collect()
}
