//! A user-written device behaviour on ringvisor's CPU backend: 8 sensor actors keep running statistics of
//! their readings and report anomalies (z-score past 4) to an aggregator actor (a built-in `counter`) with
//! kernel-to-kernel messages. The same `.cu` file is what the CUDA backend compiles with NVRTC.
//!
//! Run: `cargo run -p ringvisor-example-moving-average`

use ringvisor::device::{BehaviourSet, Device, DeviceConfig, DeviceError};
use std::time::Duration;

include!(concat!(env!("OUT_DIR"), "/ringvisor_behaviours.rs"));

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MaInit {
    aggregator: u32,
    threshold: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct MaReply {
    mean: f64,
    variance: f64,
    count: u64,
    anomaly: u32,
    reserved: u32,
}

const SENSORS: u32 = 8;
const AGGREGATOR: u32 = SENSORS;
const T: Duration = Duration::from_secs(5);

fn main() -> Result<(), DeviceError> {
    let mut behaviours = BehaviourSet::builtins();
    for b in user_behaviours() {
        behaviours.register(b)?;
    }
    let device = Device::open(DeviceConfig::default().slots(SENSORS + 1).behaviours(behaviours))?;
    device.create(AGGREGATOR, "counter", &0i64.to_le_bytes())?.wait_blocking(T)?;
    let init = MaInit { aggregator: AGGREGATOR, threshold: 4.0 };
    for s in 0..SENSORS {
        device.create(s, "moving_average", bytemuck::bytes_of(&init))?.wait_blocking(T)?;
    }

    // A deterministic stream per sensor: a slow wave plus small noise, and a spike every 50 readings.
    let mut planted = 0u64;
    let mut flagged = 0u64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in 0..400u64 {
        for s in 0..SENSORS {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let noise = (seed % 1000) as f64 / 1000.0 - 0.5;
            let spike = i > 20 && i % 50 == 0;
            let reading = 20.0 + s as f64 + noise + if spike { 40.0 } else { 0.0 };
            planted += spike as u64;
            let reply: MaReply = device.call(s, &reading.to_le_bytes(), T)?.decode()?;
            flagged += reply.anomaly as u64;
        }
    }
    // The aggregator counted every alert it received over kernel-to-kernel messages.
    let total = device.call(AGGREGATOR, &0i64.to_le_bytes(), T)?;
    let alerts = i64::from_le_bytes(total.payload()?[..8].try_into().expect("8 bytes"));
    let stats = device.call(0, &20.0f64.to_le_bytes(), T)?.decode::<MaReply>()?;
    println!("sensors: {SENSORS}, readings: {}", 400 * SENSORS);
    println!("anomalies planted: {planted}, flagged by sensors: {flagged}, counted by the aggregator: {alerts}");
    println!("sensor 0: mean {:.3}, variance {:.4} over {} readings", stats.mean, stats.variance, stats.count);
    device.shutdown();
    if alerts as u64 != flagged || flagged != planted {
        eprintln!("mismatch: every planted anomaly should be flagged once and counted once");
        std::process::exit(1);
    }
    Ok(())
}
