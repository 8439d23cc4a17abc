//! Which slots of a device are free for GPU children, and which are quarantined (never handed out again on
//! this device).

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::sync::lock;

/// Which slots of the device are free for GPU children, and which are quarantined (never handed out again
/// on this device).
pub(crate) struct SlotPool {
    inner: Mutex<PoolSets>,
}

struct PoolSets {
    free: BTreeSet<u32>,
    quarantined: BTreeSet<u32>,
}

impl SlotPool {
    pub(crate) fn new(slots: u32) -> Self {
        Self { inner: Mutex::new(PoolSets { free: (0..slots).collect(), quarantined: BTreeSet::new() }) }
    }

    /// Takes `wanted` (if free) or the lowest free slot.
    pub(crate) fn acquire(&self, wanted: Option<u32>) -> Option<u32> {
        let mut sets = lock(&self.inner);
        let slot = match wanted {
            Some(s) => sets.free.contains(&s).then_some(s)?,
            None => *sets.free.iter().next()?,
        };
        sets.free.remove(&slot);
        Some(slot)
    }

    /// Gives a slot back (a quarantined slot stays out).
    pub(crate) fn release(&self, slot: u32) {
        let mut sets = lock(&self.inner);
        if !sets.quarantined.contains(&slot) {
            sets.free.insert(slot);
        }
    }

    pub(crate) fn quarantine(&self, slot: u32) {
        let mut sets = lock(&self.inner);
        sets.free.remove(&slot);
        sets.quarantined.insert(slot);
    }

    pub(crate) fn free_count(&self) -> usize {
        lock(&self.inner).free.len()
    }

    pub(crate) fn quarantined(&self) -> Vec<u32> {
        lock(&self.inner).quarantined.iter().copied().collect()
    }
}
