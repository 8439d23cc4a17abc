//! 1,000 counter actors on the CPU backend, 1,000 messages each from 2 host threads: every counter's total
//! and every reply are checked exactly.

use ringvisor::device::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const ACTORS: u32 = 1000;
const PER_ACTOR: u32 = 1000;
const PRODUCERS: u32 = 2;
const T: Duration = Duration::from_secs(30);

#[test]
fn thousand_actors_thousand_messages_each_every_reply_exact() {
    let device = Device::open(DeviceConfig::default().slots(ACTORS).inbox_capacity(64).outbox_capacity(64)).unwrap();
    let pending: Vec<_> = (0..ACTORS).map(|s| device.create(s, "counter", &[]).unwrap()).collect();
    for p in pending {
        p.wait_blocking(T).unwrap();
    }
    let started = Instant::now();
    let replies = device.replies();
    let total = (ACTORS * PER_ACTOR) as usize;
    let collector = std::thread::spawn(move || {
        let mut got = HashMap::with_capacity(total);
        while got.len() < total {
            let r = replies.recv_timeout(T).expect("every message is answered");
            let p = r.payload().expect("no error replies");
            let sum = i64::from_le_bytes(p[..8].try_into().unwrap());
            let count = u64::from_le_bytes(p[8..16].try_into().unwrap());
            assert!(got.insert(r.correlation, (r.slot, sum, count)).is_none(), "duplicate reply {}", r.correlation);
        }
        got
    });
    // Producer p sends deltas p*PER_ACTOR + i (i < PER_ACTOR/PRODUCERS) to every actor, round-robin.
    let sent: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let d = device.clone();
            std::thread::spawn(move || {
                let mut ids = HashMap::new();
                for i in 0..PER_ACTOR / PRODUCERS {
                    for s in 0..ACTORS {
                        let delta = (p * PER_ACTOR + i) as i64;
                        let id = d.post(s, &delta.to_le_bytes(), T).unwrap();
                        ids.insert(id, s);
                    }
                }
                ids
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    let got = collector.join().unwrap();
    let elapsed = started.elapsed();
    let expected_sum: i64 =
        (0..PRODUCERS).flat_map(|p| (0..PER_ACTOR / PRODUCERS).map(move |i| (p * PER_ACTOR + i) as i64)).sum();
    // every message got exactly one reply, from the actor it was sent to
    let mut final_by_slot: HashMap<u32, (i64, u64)> = HashMap::new();
    for ids in &sent {
        for (id, slot) in ids {
            let (from, sum, count) = got[id];
            assert_eq!(from, *slot);
            let e = final_by_slot.entry(from).or_insert((0, 0));
            if count > e.1 {
                *e = (sum, count);
            }
        }
    }
    assert_eq!(got.len(), total);
    for s in 0..ACTORS {
        assert_eq!(final_by_slot[&s], (expected_sum, PER_ACTOR as u64), "actor {s}");
        let snap = device.snapshot(s).unwrap();
        assert_eq!(snap.messages_processed, PER_ACTOR as u64);
    }
    // the counts seen by replies of one actor are exactly 1..=PER_ACTOR (no reply lost or duplicated)
    let mut counts: HashMap<u32, Vec<u64>> = HashMap::new();
    for (slot, _, count) in got.values() {
        counts.entry(*slot).or_default().push(*count);
    }
    for (slot, mut c) in counts {
        c.sort_unstable();
        assert!(c.iter().copied().eq(1..=PER_ACTOR as u64), "actor {slot} reply counts");
    }
    let stats = device.stats();
    assert_eq!(stats.messages_sent, total as u64);
    assert_eq!(stats.replies, total as u64);
    eprintln!(
        "{} messages through {} actors in {:?} ({:.0} msg/s, debug build)",
        total,
        ACTORS,
        elapsed,
        total as f64 / elapsed.as_secs_f64()
    );
}
