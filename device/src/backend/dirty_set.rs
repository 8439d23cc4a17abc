//! Which slots may have replies waiting: set by the executors' workers, drained by the host poller.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::sync::OwnLine;

/// A bitmap of slots that may have replies waiting, set by the workers and drained by the host poller. Two
/// levels above it: a summary bit per word, and a flag for the whole set, so an idle poller reads one flag and
/// a poller with one reply to find reads one summary word per 4,096 slots, not every word.
pub(crate) struct DirtySet {
    words: Box<[AtomicU64]>,
    summary: Box<[AtomicU64]>,
    /// Set by a worker after each step that replied: on lines of its own, off those of its neighbours.
    any: OwnLine<AtomicBool>,
}

impl DirtySet {
    pub(crate) fn new(slots: u32) -> Self {
        let words = (slots as usize).div_ceil(64);
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Self { words: zeros(words), summary: zeros(words.div_ceil(64)), any: OwnLine(AtomicBool::new(false)) }
    }

    /// Marks the slots `first + i` for each bit `i` of `bits`; `first` is a multiple of 32.
    pub(crate) fn mark_word(&self, first: u32, bits: u32) {
        let word = (first / 64) as usize;
        let w = &self.words[word];
        let bits = u64::from(bits) << (first % 64);
        if w.load(Ordering::Relaxed) & bits != bits {
            w.fetch_or(bits, Ordering::AcqRel);
        }
        // Each level after the one below it: a drain that cleared a level before this store sees the bits below
        // it on its next call. The summary's RMW is unconditional: it is ordered with the drain's swap of the
        // same word either way (before it: the drain takes the bits; after it: the bit stays for the next one).
        self.summary[word / 64].fetch_or(1u64 << (word % 64), Ordering::AcqRel);
        self.any.store(true, Ordering::Release);
    }

    /// Calls `f` for each marked slot, clearing the marks first (each level before the one below it). Returns
    /// how many there were.
    pub(crate) fn drain(&self, mut f: impl FnMut(u32)) -> usize {
        let mut n = 0;
        // Looked at before it is swapped: a thread that polls in a loop writes the flag's line only when there
        // is something to drain, so the markers' line stays where it is between marks.
        if !self.any.load(Ordering::Relaxed) || !self.any.swap(false, Ordering::AcqRel) {
            return 0;
        }
        for (i, s) in self.summary.iter().enumerate() {
            if s.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut marked = s.swap(0, Ordering::AcqRel);
            while marked != 0 {
                let word = i * 64 + marked.trailing_zeros() as usize;
                marked &= marked - 1;
                let mut bits = self.words[word].swap(0, Ordering::AcqRel);
                while bits != 0 {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    f(word as u32 * 64 + b);
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Marks in words under different summary bits and summary words, drained once each, in slot order.
    #[test]
    fn a_dirty_set_drains_every_marked_slot_once_across_summary_words() {
        let set = DirtySet::new(20_000);
        assert_eq!(set.drain(|_| panic!("nothing marked")), 0);
        let slots = [0u32, 31, 32, 63, 64, 4_095, 4_096, 4_127, 19_999];
        for &slot in &slots {
            set.mark_word(slot / 32 * 32, 1 << (slot % 32));
        }
        let mut seen = Vec::new();
        assert_eq!(set.drain(|s| seen.push(s)), slots.len());
        assert_eq!(seen, slots);
        assert_eq!(set.drain(|_| panic!("drained twice")), 0);
    }

    /// Two threads mark while one drains: every mark is drained (by a drain after the marking ends, at the
    /// latest), none twice per mark.
    #[test]
    fn a_dirty_set_loses_no_mark_made_during_a_drain() {
        const SLOTS: u32 = 1 << 16;
        let set = Arc::new(DirtySet::new(SLOTS));
        let done = Arc::new(AtomicBool::new(false));
        let markers: Vec<_> = (0..2u32)
            .map(|t| {
                let set = set.clone();
                std::thread::spawn(move || {
                    // Each thread marks its own slots (odd or even words), one at a time.
                    for slot in (0..SLOTS).filter(|s| (s / 32) % 2 == t) {
                        set.mark_word(slot / 32 * 32, 1 << (slot % 32));
                    }
                })
            })
            .collect();
        let seen = Arc::new(Mutex::new(vec![0u32; SLOTS as usize]));
        let drainer = {
            let (set, done, seen) = (set.clone(), done.clone(), seen.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    set.drain(|s| seen.lock().unwrap()[s as usize] += 1);
                }
            })
        };
        for m in markers {
            m.join().unwrap();
        }
        done.store(true, Ordering::Release);
        drainer.join().unwrap();
        set.drain(|s| seen.lock().unwrap()[s as usize] += 1);
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter().all(|&n| n == 1),
            "slots drained other than once: {:?}",
            seen.iter().filter(|&&n| n != 1).count()
        );
    }
}
