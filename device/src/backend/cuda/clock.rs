//! The device clock against the host's. `%globaltimer` has no defined epoch: before the persistent kernel starts,
//! one GPU thread (`rv_clock_thread` in `kernels/rv_entry.cu`) answers rounds the host stores into mapped memory
//! with its raw clock; the host brackets each round with its own clock (`CLOCK_REALTIME`, what the device's
//! host-time clock `rv_grid_now_ns` gives), and the narrowest bracket, one PCIe round trip, gives the offset to
//! within half of it. (A bracket around a whole kernel launch, as before, was a launch and a sync wide.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::driver::{Driver, Handle, KernelArgs, Launch};
use super::{driver_err, wait_until};
use crate::clock::unix_now_ns;
use crate::error::DeviceError;
use crate::layout::RV_FLOOR_STOP;

/// Rounds of the probe; the narrowest bracket wins.
const ROUNDS: u64 = 32;

/// What [`calibrate`] measured.
#[derive(Clone, Copy, Debug)]
pub(super) struct Calibration {
    /// Added to a raw device clock reading, gives host time (ns since the Unix epoch).
    pub offset_ns: i64,
    /// The narrowest round trip: the offset is within half of it.
    pub bracket_ns: u64,
}

/// Runs the clock probe on `stream` over three u64 cells of mapped memory (`host` as the host sees them, `dev` as
/// the device does), waiting at most `limit` for each answer and for the kernel's end.
pub(super) fn calibrate(
    d: &dyn Driver,
    ctx: Handle,
    function: Handle,
    stream: Handle,
    host: *mut u64,
    dev: u64,
    limit: Duration,
) -> Result<Calibration, DeviceError> {
    // SAFETY: the caller passes three live, 8-byte aligned u64s of mapped memory that nothing else uses until
    // this returns; the kernel accesses them with system-scope atomics, the host with these.
    let cell = |i: usize| unsafe { AtomicU64::from_ptr(host.add(i)) };
    for i in 0..3 {
        cell(i).store(0, Ordering::Relaxed);
    }
    let args = KernelArgs::Clock { cells: dev, rounds: ROUNDS };
    d.launch(ctx, &Launch { function, grid: 1, threads: 32, args, stream, cooperative: false }).map_err(driver_err)?;
    let mut best: Option<Calibration> = None;
    for round in 1..=ROUNDS {
        let deadline = crate::clock::deadline_after(limit);
        let before = unix_now_ns();
        cell(0).store(round, Ordering::Release);
        while cell(2).load(Ordering::Acquire) != round {
            if Instant::now() >= deadline {
                cell(0).store(RV_FLOOR_STOP.into(), Ordering::Release);
                let _ = wait_until("the clock kernel's end", limit, || d.stream_done(ctx, stream).map_err(driver_err));
                return Err(DeviceError::BackendUnavailable(format!(
                    "cuda: the clock kernel did not answer round {round} within {limit:?}"
                )));
            }
            std::hint::spin_loop();
        }
        let after = unix_now_ns();
        let raw = cell(1).load(Ordering::Relaxed);
        let offset_ns = ((before / 2 + after / 2) as i64).wrapping_sub(raw as i64);
        let bracket_ns = after.saturating_sub(before);
        if best.is_none_or(|b| bracket_ns < b.bracket_ns) {
            best = Some(Calibration { offset_ns, bracket_ns });
        }
    }
    wait_until("the clock kernel's end", limit, || d.stream_done(ctx, stream).map_err(driver_err))?;
    Ok(best.expect("at least one round"))
}
