//! Host time as the device code's host-time clock gives it (`rv_grid_now_ns`: `CLOCK_REALTIME`), in nanoseconds
//! since the Unix epoch: what host stamps are compared with device stamps in.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A hundred years: how far off the deadline of a wait "for ever" lies (further would overflow the platforms
/// whose `Instant` counts nanoseconds in 64 bits).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant `timeout` after `start`. A timeout too long to add (`Duration::MAX`, "wait for ever") gives an
/// instant so far off that it never comes, where `start + timeout` would panic.
pub fn deadline_from(start: Instant, timeout: Duration) -> Instant {
    start.checked_add(timeout).or_else(|| start.checked_add(FOREVER)).unwrap_or(start)
}

/// The instant `timeout` from now ([`deadline_from`]): every timeout a user gives ringvisor goes through it.
pub fn deadline_after(timeout: Duration) -> Instant {
    deadline_from(Instant::now(), timeout)
}

/// Nanoseconds since the Unix epoch now (0 for a clock set before it).
pub(crate) fn unix_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_the_sum_or_for_a_timeout_too_long_to_add_a_century_away() {
        let now = Instant::now();
        assert_eq!(deadline_from(now, Duration::from_secs(3)), now + Duration::from_secs(3));
        assert_eq!(deadline_from(now, Duration::ZERO), now);
        let forever = deadline_from(now, Duration::MAX);
        assert!(forever >= now + Duration::from_secs(99 * 365 * 24 * 3600), "{:?}", forever - now);
        assert!(deadline_after(Duration::MAX) > Instant::now() + Duration::from_secs(3600));
    }
}
