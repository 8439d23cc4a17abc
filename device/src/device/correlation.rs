//! Correlation ids: unique in the process, so in every device (a forwarded call's id on its target device comes
//! from here as well), handed out to each thread from batches of its own. A call took its id with a
//! read-modify-write of one counter that every calling thread shares: a locked instruction on the path of every
//! call, and the counter's line moving between the cores of threads that call at once. Ids need only be unique:
//! those left in a thread's batch when it ends are never used.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ids a thread takes from the shared counter at a time.
const BATCH: u64 = 64;

/// The next id no thread has taken (0 is never an id).
static NEXT: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's batch: ids from `.0` up to, not including, `.1`.
    static BATCH_LEFT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The first of `n` consecutive ids no one else gets: from this thread's batch while it has that many left, else
/// from a new batch (or, for `n` of a batch or more, from the counter directly).
pub(super) fn take(n: u64) -> u64 {
    BATCH_LEFT.with(|left| {
        let (next, end) = left.get();
        if end - next >= n {
            left.set((next + n, end));
            return next;
        }
        if n >= BATCH {
            return NEXT.fetch_add(n, Ordering::Relaxed);
        }
        let start = NEXT.fetch_add(BATCH, Ordering::Relaxed);
        left.set((start + n, start + BATCH));
        start
    })
}

/// One new id.
pub(super) fn next() -> u64 {
    take(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Ids taken one at a time and in runs, by several threads at once, never repeat and are never 0.
    #[test]
    fn ids_from_every_thread_are_unique_whatever_the_run_lengths() {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut ids = Vec::new();
                    for i in 0..2_000u64 {
                        let n = [1, 1, 3, BATCH - 1, BATCH, BATCH + 5][((i + t) % 6) as usize];
                        let first = take(n);
                        ids.extend(first..first + n);
                    }
                    ids
                })
            })
            .collect();
        let mut seen = HashSet::new();
        for t in threads {
            for id in t.join().expect("thread") {
                assert_ne!(id, 0, "0 is not an id");
                assert!(seen.insert(id), "id {id} handed out twice");
            }
        }
    }

    /// A thread's consecutive single ids come from its batch: consecutive, with no take from the shared counter
    /// between them (another thread's ids do not interleave).
    #[test]
    fn a_threads_single_ids_are_consecutive_within_its_batch() {
        std::thread::spawn(|| {
            let first = next();
            let others = std::thread::spawn(|| (0..10).map(|_| next()).collect::<Vec<_>>()).join().expect("other");
            let second = next();
            assert_eq!(second, first + 1);
            assert!(others.iter().all(|&o| o < first || o >= first + BATCH), "another thread's batch is its own");
        })
        .join()
        .expect("thread");
    }
}
