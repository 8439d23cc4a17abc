//! The demo's `sensor` and `alerts` behaviours through the real device code: running statistics, z-score
//! anomalies reported kernel to kernel, exact accounting of planted readings, bad readings answered with an
//! error, and what a restart's event reports.

mod common;
use common::*;
use ringvisor_device::*;

fn reading(value: f64, planted: bool, seq: u32) -> Vec<u8> {
    let mut v = value.to_le_bytes().to_vec();
    v.extend_from_slice(&u32::from(planted).to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v
}

fn sensor_init(alert_slot: u32, warmup: u32, threshold: f64) -> Vec<u8> {
    let mut v = alert_slot.to_le_bytes().to_vec();
    v.extend_from_slice(&warmup.to_le_bytes());
    v.extend_from_slice(&threshold.to_le_bytes());
    v
}

/// anomalies, planted detected, false alarms, missed in warm-up, missed below threshold.
fn totals(d: &Device) -> [u64; 5] {
    let r: [u64; 6] = d.call(0, &[], T).unwrap().decode().unwrap();
    [r[0], r[1], r[2], r[3], r[4]]
}

/// A reading around 10 (deterministic noise of amplitude 0.5).
fn normal(i: u32) -> f64 {
    10.0 + 0.5 * ((i as f64) * 1.7).sin()
}

fn sensors_flag_anomalies_to_the_aggregator_and_account_for_every_planted_reading() {
    if skip_without_f64() {
        return;
    }
    let d = open(4);
    d.create(0, "alerts", &[]).unwrap().wait_blocking(T).unwrap();
    d.create(1, "sensor", &sensor_init(0, 8, 4.0)).unwrap().wait_blocking(T).unwrap();
    // A planted reading during warm-up cannot be scored: it is reported as missed.
    d.send(1, &reading(100.0, true, 0)).unwrap();
    for i in 1..50 {
        d.send(1, &reading(normal(i), false, i)).unwrap();
    }
    d.send(1, &reading(100.0, true, 50)).unwrap(); // planted, far out: detected
    d.send(1, &reading(-80.0, false, 51)).unwrap(); // far out, not planted: a false alarm
    d.send(1, &reading(normal(52), true, 52)).unwrap(); // planted but within the threshold: missed
    let stats: (u64, f64, f64, u64) = {
        let r = d.call(1, &reading(normal(53), false, 53), T).unwrap();
        let p = r.payload().unwrap();
        let f = |i: usize| f64::from_le_bytes(p[i..i + 8].try_into().unwrap());
        (u64::from_le_bytes(p[..8].try_into().unwrap()), f(8), f(16), u64::from_le_bytes(p[24..32].try_into().unwrap()))
    };
    // Anomalies are not folded into the statistics: 1 + 49 + 1 + 1 normal-or-warm-up readings.
    assert_eq!(stats.0, 52);
    assert!((stats.1 - 11.7).abs() < 0.5, "mean {}", stats.1); // the warm-up outlier pulls it up a little
    assert_eq!(stats.3, 2);
    eventually("alerts counted", || totals(&d) == [2, 1, 1, 1, 1]);
}

fn bad_readings_are_answered_with_an_error_and_the_sensor_keeps_running() {
    if skip_without_f64() {
        return;
    }
    let d = open(2);
    d.create(1, "sensor", &sensor_init(0, 4, 3.0)).unwrap().wait_blocking(T).unwrap();
    for bad in [reading(f64::NAN, false, 0), reading(f64::INFINITY, false, 1), vec![1, 2, 3]] {
        assert!(matches!(d.call(1, &bad, T), Err(DeviceError::ErrorReply { .. })), "{bad:?}");
    }
    assert_eq!(d.snapshot(1).unwrap().state, SlotState::Active);
    assert!(d.call(1, &reading(1.0, false, 2), T).is_ok());
}

/// count, mean, variance, anomalies: the reply to a reading the host called with.
fn stats(d: &Device, slot: u32, value: f64, seq: u32) -> (u64, f64, f64, u64) {
    let r = d.call(slot, &reading(value, false, seq), T).unwrap();
    let p = r.payload().unwrap();
    let u = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().unwrap());
    (u(0), f64::from_bits(u(8)), f64::from_bits(u(16)), u(24))
}

/// No aggregator, and a warm-up longer than any run here: every reading is folded into the statistics.
fn unscored_sensor_init() -> Vec<u8> {
    sensor_init(u32::MAX, 1_000_000, 4.0)
}

fn a_reading_comes_back_bit_for_bit_as_the_mean_of_a_fresh_sensor() {
    if skip_without_f64() {
        return;
    }
    // The mean after one reading x is 0 + (x - 0) / 1 = x exactly: what comes back is the reading, read from its
    // bits and written back to bits by the device (on wgpu, rv_f64.wgsl's conversions). Normal numbers only:
    // the wgpu backend reads a subnormal as zero (docs/protocol.md).
    let d = open(2);
    let values = [
        1.0,
        -2.5,
        0.1,
        -1.0 / 3.0,
        123_456_789.123_456_78,
        9_007_199_254_740_993.0,
        6.02214076e23,
        1e-300,
        -1e300,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
    ];
    d.create(1, "sensor", &unscored_sensor_init()).unwrap().wait_blocking(T).unwrap();
    for (seq, x) in values.into_iter().enumerate() {
        d.restart(1, "sensor", &unscored_sensor_init()).unwrap().wait_blocking(T).unwrap();
        let (count, mean, variance, anomalies) = stats(&d, 1, x, seq as u32);
        assert_eq!((count, mean.to_bits(), variance.to_bits(), anomalies), (1, x.to_bits(), 0, 0), "{x:e}");
    }
}

fn the_running_statistics_agree_with_the_host_over_many_magnitudes() {
    if skip_without_f64() {
        return;
    }
    // Welford's update computed here in f64, in the same order as the device code; a device may contract
    // a multiply-add (a GPU's fused multiply-add), hence the relative tolerance, far below what a lost
    // significand word or an exponent off by one would give.
    let d = open(2);
    d.create(1, "sensor", &unscored_sensor_init()).unwrap().wait_blocking(T).unwrap();
    for (seq, scale) in [1e-290, -3e-20, 1.0, 4.5e9, -7e150].into_iter().enumerate() {
        d.restart(1, "sensor", &unscored_sensor_init()).unwrap().wait_blocking(T).unwrap();
        let (mut n, mut mean, mut m2) = (0u64, 0f64, 0f64);
        for i in 0..24u32 {
            let x = scale * (1.0 + 0.25 * (f64::from(i) * 0.9).sin());
            n += 1;
            let delta = x - mean;
            mean += delta / n as f64;
            m2 += delta * (x - mean);
            let variance = if n > 1 { m2 / (n - 1) as f64 } else { 0.0 };
            let got = stats(&d, 1, x, (seq * 100) as u32 + i);
            let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * b.abs();
            assert_eq!((got.0, got.3), (n, 0), "scale {scale:e}, reading {i}");
            assert!(close(got.1, mean) && close(got.2, variance), "scale {scale:e}, reading {i}: {got:?}");
        }
    }
}

fn a_restart_event_reports_what_the_previous_incarnation_processed() {
    let d = open(2);
    d.create(1, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    for _ in 0..5 {
        d.call(1, &1i64.to_le_bytes(), T).unwrap();
    }
    let e = d.restart(1, "counter", &[]).unwrap().wait_blocking(T).unwrap();
    assert_eq!((e.event.kind, e.event.messages_processed), (EventKind::Restarted, 5));
    d.call(1, &1i64.to_le_bytes(), T).unwrap();
    let e = d.kill(1).unwrap().wait_blocking(T).unwrap();
    assert_eq!((e.event.kind, e.event.messages_processed), (EventKind::Killed, 1));
}

on_every_backend!(
    sensors_flag_anomalies_to_the_aggregator_and_account_for_every_planted_reading,
    bad_readings_are_answered_with_an_error_and_the_sensor_keeps_running,
    a_reading_comes_back_bit_for_bit_as_the_mean_of_a_fresh_sensor,
    the_running_statistics_agree_with_the_host_over_many_magnitudes,
    a_restart_event_reports_what_the_previous_incarnation_processed,
);

/// On wgpu, `sensor` computes in f64: it runs where the adapter has shader f64 (lavapipe has), and is refused as
/// an unknown behaviour where it has not.
fn skip_without_f64() -> bool {
    skip_on_wgpu_if(!wgpu_shader_f64(), "the adapter has no shader f64, which sensor needs on this backend")
}

/// On the wgpu backend a behaviour with no WGSL version (here a user behaviour with only a host function) is
/// refused by the device when it is created, with the same error as a behaviour the device does not know;
/// other slots are unaffected.
#[cfg(feature = "wgpu")]
#[test]
fn the_wgpu_backend_refuses_to_create_a_behaviour_it_has_no_wgsl_version_of() {
    if !wgpu_or_skip() {
        return;
    }
    // SAFETY: returns a pointer to a function of the linked kernel library.
    let host_fn = unsafe { ringvisor_device::ffi::rv_builtin_behaviour(2) }.expect("counter is linked");
    let host_only = UserBehaviour {
        name: "host_only",
        function: "host_only",
        host_fn,
        cuda_source: "",
        wgsl_source: "",
        state_bytes: 0,
    };
    let set = BehaviourSet::builtins().with(host_only).unwrap();
    let config = DeviceConfig::default().slots(2).behaviours(set);
    let d = Device::open(config.backend(Backend::Wgpu(WgpuConfig::default()))).unwrap();
    let err = d.create(0, "host_only", &[]).unwrap().wait_blocking(T);
    assert!(matches!(err, Err(DeviceError::Rejected { slot: 0, code: DeviceCode::UnknownBehaviour })), "{err:?}");
    d.create(1, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    assert_eq!(d.call(1, b"still here", T).unwrap().payload().unwrap(), b"still here");
}
