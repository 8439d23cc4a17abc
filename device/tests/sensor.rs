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
    if skip_on_wgpu("sensor and alerts compute in f64, which WGSL does not have: they are not on the wgpu backend") {
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
    if skip_on_wgpu("sensor and alerts compute in f64, which WGSL does not have: they are not on the wgpu backend") {
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
    a_restart_event_reports_what_the_previous_incarnation_processed,
);

/// On the wgpu backend a behaviour with no WGSL version is refused by the device when it is created, with the
/// same error as a behaviour the device does not know; other slots are unaffected.
#[cfg(feature = "wgpu")]
#[test]
fn the_wgpu_backend_refuses_to_create_a_behaviour_it_has_no_wgsl_version_of() {
    if !wgpu_or_skip() {
        return;
    }
    let d = Device::open(DeviceConfig::default().slots(2).backend(Backend::Wgpu(WgpuConfig::default()))).unwrap();
    let err = d.create(0, "sensor", &sensor_init(1, 8, 3.0)).unwrap().wait_blocking(T);
    assert!(matches!(err, Err(DeviceError::Rejected { slot: 0, code: DeviceCode::UnknownBehaviour })), "{err:?}");
    d.create(1, "echo", &[]).unwrap().wait_blocking(T).unwrap();
    assert_eq!(d.call(1, b"still here", T).unwrap().payload().unwrap(), b"still here");
}
