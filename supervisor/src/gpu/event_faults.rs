//! Faults on the path from the device to slot actors (for fault-injection tests): a slot's events dropped or
//! delayed for a while. Dead-letter accounting is not affected, only what the supervision layer learns, and
//! when.

use std::time::{Duration, Instant};

use super::slots::DeviceSlots;

/// A fault on the path of a slot's device events to its slot actor (dead-letter accounting is not
/// affected: only what the supervision layer learns, and when).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventFault {
    /// The slot's events are not delivered to its slot actor.
    Drop,
    /// The slot's events reach its slot actor this much later.
    Delay(Duration),
}

impl DeviceSlots {
    /// Applies `fault` to `slot`'s events for `duration`.
    pub(crate) fn inject_event_fault(&self, slot: u32, fault: EventFault, duration: Duration) {
        self.event_faults.insert(slot, (fault, Instant::now() + duration));
    }
}
