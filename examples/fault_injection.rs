//! The fault-injection test a user writes for their own tree: inject a fault, assert the restart and the
//! dead letters, assert the tree recovered. (Run as an example; the same body works in a `#[tokio::test]`.)
use ringvisor::faults::InjectedFault;
use ringvisor::prelude::*;
use ringvisor::supervisor::{DeadLetterReason, RunState, TreeEvent};

/// The tree under test: three sensors restarted one for one.
fn my_tree() -> SupervisorSpec {
    let sensor = |n: u32| ChildSpec::gpu(format!("s{n}"), GpuChild::new("counter")).name(format!("plant/sensors/s{n}"));
    SupervisorSpec::new(Strategy::OneForOne)
        .intensity(5, Duration::from_secs(10))
        .child(sensor(1))
        .child(sensor(2))
        .child(sensor(3))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::start(DeviceConfig::default().slots(8), my_tree()).await?;
    let mut events = rt.services().events().subscribe();
    let s2 = rt.gpu("plant/sensors/s2").expect("registered");
    assert_eq!(s2.call(&10i64.to_le_bytes(), Duration::from_secs(1)).await?.decode::<[i64; 2]>()?[0], 10);

    // 1. Inject: s2 crashes on its next message.
    assert_eq!(rt.faults().inject("plant/sensors/s2", InjectedFault::CrashNextMessage)?, 1);
    let poison = s2.call(&1i64.to_le_bytes(), Duration::from_secs(1)).await;
    assert!(poison.is_err(), "the message it crashed on is not answered");

    // 2. Assert the restart (only s2: one_for_one) and the dead letter (quarantined as poison).
    let mut restarted = Vec::new();
    while restarted.is_empty() {
        if let Ok(Some(TreeEvent::ChildStarted { child, .. })) =
            tokio::time::timeout(Duration::from_secs(5), events.recv()).await
        {
            restarted.push(child);
        }
    }
    assert_eq!(restarted, ["s2"]);
    let letters = rt.dead_letters().snapshot();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, DeadLetterReason::Poison);
    assert_eq!(letters[0].target.as_deref(), Some("plant/sensors/s2"));

    // 3. Assert the tree recovered: everyone running, s2 answering from fresh state through the same handle.
    let children = rt.root().which_children().await?;
    assert!(children.iter().all(|c| c.state == RunState::Running));
    assert_eq!(s2.call(&3i64.to_le_bytes(), Duration::from_secs(1)).await?.decode::<[i64; 2]>()?[0], 3);

    // Patterns hit several children at once: kill every sensor's device actor; all three come back.
    assert_eq!(rt.faults().inject("plant/sensors/*", InjectedFault::KillDeviceActor)?, 3);
    for name in ["plant/sensors/s1", "plant/sensors/s2", "plant/sensors/s3"] {
        let actor = rt.gpu(name).expect("still registered");
        assert!(actor.call(&1i64.to_le_bytes(), Duration::from_secs(5)).await.is_ok(), "{name} recovered");
    }
    println!("fault injection: restart, dead letter and recovery asserted");
    rt.shutdown().await;
    Ok(())
}
