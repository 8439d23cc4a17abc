//! The spinning floor: two threads ping-ponging a value through one atomic, the least a round trip between two
//! cores can cost on the machine. Std only, so that `bench/examples/latency_probe.rs` includes this file as it is.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// `n` round trips between this thread and a spinning peer, in nanoseconds each (two clock reads included, as in
/// every round-trip row beside it).
pub fn spin_round_trips(n: usize) -> Vec<f64> {
    let cell = Arc::new(AtomicU64::new(0));
    let peer = cell.clone();
    let rounds = n as u64;
    let echo = std::thread::spawn(move || {
        for i in 0..rounds {
            while peer.load(Ordering::Acquire) != 2 * i + 1 {
                spin_loop();
            }
            peer.store(2 * i + 2, Ordering::Release);
        }
    });
    let samples = (0..rounds)
        .map(|i| {
            let t0 = Instant::now();
            cell.store(2 * i + 1, Ordering::Release);
            while cell.load(Ordering::Acquire) != 2 * i + 2 {
                spin_loop();
            }
            t0.elapsed().as_nanos() as f64
        })
        .collect();
    echo.join().expect("spinner");
    samples
}
