use ringvisor_device::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

#[test]
fn counter_round_trip() {
    let device = Device::open(DeviceConfig::default().slots(4)).unwrap();
    let ev = device.create(1, "counter", &10i64.to_le_bytes()).unwrap().wait_blocking(T).unwrap();
    assert_eq!(ev.event.kind, EventKind::Created);
    assert_eq!(ev.event.generation, 1);
    let r = device.call(1, &5i64.to_le_bytes(), T).unwrap();
    let p = r.payload().unwrap();
    assert_eq!(i64::from_le_bytes(p[..8].try_into().unwrap()), 15);
    device.shutdown();
}
