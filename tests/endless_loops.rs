//! A behaviour that never returns, as users write it (the `test` behaviour's op 6: a spin on a state word
//! nothing writes), on every worker of a CPU device, through the runtime: the stuck incarnations are failed as
//! hung and their slots quarantined; past the quarantine limit the device is restarted and the whole tree comes
//! back on the new device, every child answering; shutdown and drop end within their bound though the old
//! device's workers never return. (Its own test binary: the spinning threads keep cores busy until the process
//! exits.)

mod support;

use std::time::{Duration, Instant};

use ringvisor::device::{Backend, CpuConfig, DeviceConfig};
use ringvisor::prelude::*;

const T: Duration = Duration::from_secs(20);

/// A `test` behaviour message: op, then a u32 argument.
fn test_msg(op: u32, arg: u32) -> Vec<u8> {
    let mut v = op.to_le_bytes().to_vec();
    v.extend_from_slice(&arg.to_le_bytes());
    v
}

fn child(id: &str) -> ChildSpec {
    ChildSpec::gpu(id, GpuChild::new("test").heartbeat_timeout(Some(Duration::from_millis(300))))
        .name(format!("app/{id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_loops_on_every_worker_restart_the_device_the_tree_comes_back_and_shutdown_is_bounded() {
    let cpu = CpuConfig { workers: 2, ..CpuConfig::default() };
    let config = DeviceConfig::default().slots(8).state_bytes(64).backend(Backend::Cpu(cpu));
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(10, Duration::from_secs(10))
        .child(child("a"))
        .child(child("b"))
        .child(child("c"));
    let rt = Runtime::builder().device(config).quarantine_limit(1).start(spec).await.unwrap();
    let old_device = rt.device();
    let mut events = rt.services().events().subscribe();
    // both workers of the device enter a behaviour that never returns
    for name in ["app/a", "app/b"] {
        rt.gpu(name).unwrap().send(&test_msg(6, 0)).unwrap();
    }
    // the device is replaced (hung actors quarantined past the limit, or block 0's heartbeat stale) ...
    let deadline = Instant::now() + T;
    while rt.device().same_device(&old_device) {
        if Instant::now() > deadline {
            let mut seen = Vec::new();
            while let Ok(e) = events.try_recv() {
                seen.push(format!("{e:?}"));
            }
            panic!(
                "no new device; health {:?}, quarantined {:?}; events {seen:#?}",
                old_device.health(),
                rt.services().quarantined_slots()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ... and the tree is started again on it: every child answers there
    let deadline = Instant::now() + T;
    for name in ["app/a", "app/b", "app/c"] {
        let msg = test_msg(1, 7);
        loop {
            // the new device is in place before the tree is started on it: the name comes back with the tree
            let Some(actor) = rt.gpu(name) else {
                assert!(Instant::now() < deadline, "{name} is not registered again");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            match actor.call(&msg, Duration::from_secs(1)).await {
                Ok(reply) if actor.device().same_device(&rt.device()) => {
                    assert_eq!(reply.payload().unwrap(), &msg[..], "{name}");
                    break;
                }
                _ => {
                    assert!(Instant::now() < deadline, "{name} does not answer on the new device");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
    let mut restarted_tree = false;
    while let Ok(e) = events.try_recv() {
        restarted_tree |= matches!(&e, TreeEvent::ChildStarted { child, .. } if child == "c");
    }
    assert!(restarted_tree, "c, never stuck itself, was started again with the tree on the new device");
    // the old device's workers still spin: the shutdown abandons them within its bound
    let started = Instant::now();
    rt.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(15), "shutdown took {:?}", started.elapsed());
    drop(old_device);
}
