//! A user-written device behaviour, `moving_average`: running statistics of a stream of readings with
//! anomaly alerts sent kernel to kernel to an aggregator. Written once in C (`kernels/moving_average.cu`: the
//! CPU backend's host build, and NVRTC's source on CUDA) and once in WGSL (`kernels/moving_average.wgsl`, for
//! the wgpu backend); `build.rs` hands both to `ringvisor-build`.

use ringvisor::device::{BehaviourSet, DeviceError};

include!(concat!(env!("OUT_DIR"), "/ringvisor_behaviours.rs"));

/// The init message (`ma_init`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MaInit {
    /// The slot alerts go to.
    pub aggregator: u32,
    /// A reading whose z-score is past this is an anomaly.
    pub threshold: f32,
}

/// The reply to a reading (`ma_reply`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MaReply {
    /// Mean of the readings so far (anomalies left out).
    pub mean: f64,
    /// Their sample variance.
    pub variance: f64,
    /// How many readings the statistics hold.
    pub count: u64,
    /// 1 when this reading was an anomaly (and reported to the aggregator).
    pub anomaly: u32,
    /// Zero.
    pub reserved: u32,
}

/// The built-ins and `moving_average`.
pub fn behaviours() -> Result<BehaviourSet, DeviceError> {
    let mut set = BehaviourSet::builtins();
    for b in user_behaviours() {
        set.register(b)?;
    }
    Ok(set)
}

/// A deterministic stream of readings for `sensors` sensors, round by round: a level per sensor, small
/// noise, and a spike of +40 every 50 rounds (after the first 20). Each item: sensor, reading, planted spike.
pub fn readings(sensors: u32, rounds: u64) -> impl Iterator<Item = (u32, f64, bool)> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    (0..rounds).flat_map(move |i| (0..sensors).map(move |s| (i, s))).map(move |(i, s)| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let noise = (seed % 1000) as f64 / 1000.0 - 0.5;
        let spike = i > 20 && i % 50 == 0;
        (s, 20.0 + s as f64 + noise + if spike { 40.0 } else { 0.0 }, spike)
    })
}
