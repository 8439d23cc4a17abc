//! `moving_average` on every backend that can run here: the C structs and their Rust mirrors agree, the WGSL
//! version compiles (naga, no adapter needed), and on the wgpu backend it answers every reading exactly as the
//! C version does on the CPU backend: same statistics, same anomalies, same alerts counted.

use ringvisor::device::{Backend, Device, DeviceCode, DeviceConfig, DeviceError, Reply};
use ringvisor_example_moving_average::{behaviours, c_layouts, readings, MaInit, MaReply};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
const SENSORS: u32 = 4;
const AGGREGATOR: u32 = SENSORS;

#[test]
fn the_c_message_structs_and_the_rust_ones_agree() {
    use ringvisor::device::rust_layout;
    let rust = [
        rust_layout!(MaInit, [aggregator, threshold]),
        rust_layout!(MaReply, [mean, variance, count, anomaly, reserved]),
    ];
    let c = c_layouts();
    assert_eq!(c.len(), rust.len());
    for (c, rust) in c.iter().zip(&rust) {
        c.check(rust).unwrap();
    }
}

#[test]
fn the_wgsl_version_compiles() {
    ringvisor::device::wgsl_check(&behaviours().unwrap()).unwrap();
}

/// Opens a device with the sensors and their aggregator created.
fn fleet(backend: Backend) -> Device {
    let config = DeviceConfig::default().slots(SENSORS + 1).behaviours(behaviours().unwrap()).backend(backend);
    let device = Device::open(config).unwrap();
    device.create(AGGREGATOR, "counter", &0i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    let init = MaInit { aggregator: AGGREGATOR, threshold: 4.0 };
    for s in 0..SENSORS {
        device.create(s, "moving_average", bytemuck::bytes_of(&init)).unwrap().wait_blocking(T).unwrap();
    }
    device
}

/// Every reply to the stream, then the aggregator's count.
fn run(device: &Device) -> (Vec<MaReply>, i64) {
    let replies = readings(SENSORS, 120)
        .map(|(sensor, reading, _)| device.call(sensor, &reading.to_le_bytes(), T).unwrap().decode().unwrap())
        .collect();
    let total: Reply = device.call(AGGREGATOR, &0i64.to_le_bytes(), T).unwrap();
    (replies, i64::from_le_bytes(total.payload().unwrap()[..8].try_into().unwrap()))
}

/// A bad init fails the creation with the behaviour's own code; a reading of the wrong size is answered with
/// an error and the actor keeps running.
fn bad_input_is_refused(backend: Backend) {
    let config = DeviceConfig::default().slots(2).behaviours(behaviours().unwrap()).backend(backend);
    let device = Device::open(config).unwrap();
    let err = device.create(0, "moving_average", &[1, 2, 3]).unwrap().wait_blocking(T);
    assert_eq!(err.unwrap_err(), DeviceError::CreateFailed { slot: 0, code: DeviceCode::User(1001) });
    let init = MaInit { aggregator: 0, threshold: 4.0 };
    device.create(1, "moving_average", bytemuck::bytes_of(&init)).unwrap().wait_blocking(T).unwrap();
    let err = device.call(1, &[0u8; 4], T);
    assert!(matches!(err, Err(DeviceError::ErrorReply { code: DeviceCode::BadEnvelope, .. })), "{err:?}");
    let reply: MaReply = device.call(1, &5.0f64.to_le_bytes(), T).unwrap().decode().unwrap();
    assert_eq!((reply.count, reply.mean), (1, 5.0));
}

#[test]
fn the_wgsl_version_answers_as_the_c_version_does() {
    let cpu = fleet(Backend::parse("cpu").unwrap());
    let (expected, alerts) = run(&cpu);
    assert!(alerts > 0 && expected.iter().any(|r| r.anomaly == 1), "the stream has anomalies");
    bad_input_is_refused(Backend::parse("cpu").unwrap());
    if !wgpu_with_f64_or_skip() {
        return;
    }
    let gpu = fleet(Backend::parse("wgpu").unwrap());
    let (got, gpu_alerts) = run(&gpu);
    assert_eq!(gpu_alerts, alerts);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        // A GPU may fuse a multiply-add the host rounds twice: equal to 1e-12, relative.
        let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * b.abs();
        assert_eq!((g.count, g.anomaly, g.reserved), (e.count, e.anomaly, e.reserved), "reply {i}");
        assert!(close(g.mean, e.mean) && close(g.variance, e.variance), "reply {i}: {g:?} vs {e:?}");
    }
    bad_input_is_refused(Backend::parse("wgpu").unwrap());
}

/// Whether a Vulkan adapter with shader f64 is here (`moving_average` computes in f64); without one the test
/// says it skipped the wgpu half, or fails when `RINGVISOR_REQUIRE_WGPU=1` (CI, lavapipe: it has f64).
fn wgpu_with_f64_or_skip() -> bool {
    if ringvisor::device::wgpu_shader_f64() {
        return true;
    }
    assert!(
        std::env::var("RINGVISOR_REQUIRE_WGPU").map_or(true, |v| v != "1"),
        "RINGVISOR_REQUIRE_WGPU=1 but wgpu finds no Vulkan adapter with shader f64 (apt-get install mesa-vulkan-drivers)"
    );
    eprintln!("SKIPPED the wgpu half: no Vulkan adapter with shader f64");
    false
}
