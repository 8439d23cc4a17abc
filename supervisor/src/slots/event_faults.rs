//! Faults on the path from the device to supervisors (for fault-injection tests): a slot's events dropped or
//! delayed for a while. Dead-letter accounting is not affected, only what the supervision layer learns, and
//! when.

use std::time::{Duration, Instant};

use dashmap::DashMap;

/// A fault on the path of a slot's device events to its child's supervisor (dead-letter accounting is not
/// affected: only what the supervision layer learns, and when).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventFault {
    /// The slot's events are not delivered to its child's supervisor.
    Drop,
    /// The slot's events reach its child's supervisor this much later.
    Delay(Duration),
}

/// The event faults in force, per slot, each until its end.
#[derive(Default)]
pub(crate) struct EventFaults {
    by_slot: DashMap<u32, (EventFault, Instant)>,
}

impl EventFaults {
    /// Applies `fault` to `slot`'s events for `duration`.
    pub(crate) fn inject(&self, slot: u32, fault: EventFault, duration: Duration) {
        self.by_slot.insert(slot, (fault, ringvisor_device::deadline_after(duration)));
    }

    /// The fault in force on `slot`'s events now, if any (one that has ended is forgotten).
    pub(crate) fn in_force(&self, slot: u32) -> Option<EventFault> {
        let (fault, until) = *self.by_slot.get(&slot)?.value();
        if Instant::now() >= until {
            self.by_slot.remove(&slot);
            return None;
        }
        Some(fault)
    }
}
