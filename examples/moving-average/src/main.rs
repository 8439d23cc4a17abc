//! A user-written device behaviour: 8 sensor actors keep running statistics of their readings and report
//! anomalies (z-score past 4) to an aggregator actor (a built-in `counter`) with kernel-to-kernel messages.
//! The same `.cu` file is what the CUDA backend compiles with NVRTC; the wgpu backend runs its WGSL version.
//!
//! Run: `cargo run -p ringvisor-example-moving-average` (CPU backend), or with `RINGVISOR_BACKEND=wgpu`
//! (or `cuda`).

use ringvisor::device::{Device, DeviceConfig, DeviceError};
use ringvisor_example_moving_average::{behaviours, readings, MaInit, MaReply};
use std::time::Duration;

const SENSORS: u32 = 8;
const ROUNDS: u64 = 400;
const AGGREGATOR: u32 = SENSORS;
const T: Duration = Duration::from_secs(5);

fn main() -> Result<(), DeviceError> {
    let device = Device::open(DeviceConfig::default().slots(SENSORS + 1).behaviours(behaviours()?))?;
    device.create(AGGREGATOR, "counter", &0i64.to_le_bytes())?.wait_blocking(T)?;
    let init = MaInit { aggregator: AGGREGATOR, threshold: 4.0 };
    for s in 0..SENSORS {
        device.create(s, "moving_average", bytemuck::bytes_of(&init))?.wait_blocking(T)?;
    }

    let mut planted = 0u64;
    let mut flagged = 0u64;
    for (sensor, reading, spike) in readings(SENSORS, ROUNDS) {
        planted += u64::from(spike);
        let reply: MaReply = device.call(sensor, &reading.to_le_bytes(), T)?.decode()?;
        flagged += u64::from(reply.anomaly);
    }
    // The aggregator counted every alert it received over kernel-to-kernel messages.
    let total = device.call(AGGREGATOR, &0i64.to_le_bytes(), T)?;
    let alerts = i64::from_le_bytes(total.payload()?[..8].try_into().expect("8 bytes"));
    let stats = device.call(0, &20.0f64.to_le_bytes(), T)?.decode::<MaReply>()?;
    println!("on {}", device.describe());
    println!("sensors: {SENSORS}, readings: {}", ROUNDS * u64::from(SENSORS));
    println!("anomalies planted: {planted}, flagged by sensors: {flagged}, counted by the aggregator: {alerts}");
    println!("sensor 0: mean {:.3}, variance {:.4} over {} readings", stats.mean, stats.variance, stats.count);
    device.shutdown();
    if alerts as u64 != flagged || flagged != planted {
        eprintln!("mismatch: every planted anomaly should be flagged once and counted once");
        std::process::exit(1);
    }
    Ok(())
}
