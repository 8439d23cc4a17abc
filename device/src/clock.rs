//! Host time as the device code's host-time clock gives it (`rv_grid_now_ns`: `CLOCK_REALTIME`), in nanoseconds
//! since the Unix epoch: what host stamps are compared with device stamps in.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch now (0 for a clock set before it).
pub(crate) fn unix_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
