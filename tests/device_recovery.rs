//! Faults the slot-level supervisors cannot fix on their own: a wedged actor (its slot is quarantined and
//! the child moves), too many quarantined slots or a lost device (the device is restarted: one_for_all at
//! the device level), a short executor stall (ridden out), and a device that keeps dying (the runtime gives
//! up).

mod support;

use std::time::{Duration, Instant};

use ringvisor::device::{
    Backend, CudaConfig, CudaDriver, DeviceConfig, DeviceHealth, EmulatedDriver, EmulatedGpu, SlotState,
};
use ringvisor::faults::InjectedFault;
use ringvisor::prelude::*;
use ringvisor::supervisor::*;
use ringvisor::{DEVICE_CHILD, TOP_SUPERVISOR};

const T: Duration = Duration::from_secs(15);

/// The backends these tests run on: the CPU backend, and the CUDA backend over the emulated driver (where a
/// device restart opens the new device while the old one's kernel may still run: the release order matters).
enum On {
    Cpu,
    CudaEmulated(EmulatedDriver),
}

fn config(on: &On) -> DeviceConfig {
    let backend = match on {
        On::Cpu => Backend::Cpu(Default::default()),
        On::CudaEmulated(driver) => {
            Backend::Cuda(CudaConfig { driver: CudaDriver::Emulated(driver.clone()), ..CudaConfig::default() })
        }
    };
    DeviceConfig::default().slots(8).inbox_capacity(16).outbox_capacity(16).state_bytes(64).backend(backend)
}

/// One test per backend for each listed `async fn name(on: On)`; on the emulated driver, no CUDA rule broken
/// (a device restart must not free the old device's memory under the new device's kernel).
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(super::On::Cpu).await } )*
        }
        mod cuda_emulated {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() {
                   let driver = super::EmulatedDriver::new(super::EmulatedGpu::default());
                   super::$name(super::On::CudaEmulated(driver.clone())).await;
                   assert_eq!(driver.violations(), Vec::<String>::new(), "CUDA rules broken");
               } )*
        }
    };
}

fn counter(id: &str) -> ChildSpec {
    ChildSpec::gpu(id, GpuChild::new("counter").heartbeat_timeout(Some(Duration::from_millis(200))))
        .name(format!("app/{id}"))
}

fn tree() -> SupervisorSpec {
    SupervisorSpec::new(Strategy::OneForOne)
        .intensity(10, Duration::from_secs(10))
        .child(counter("a"))
        .child(counter("b"))
        .child(counter("c"))
}

async fn total(actor: &GpuActorRef, delta: i64) -> Result<i64, SendError> {
    support::counter_total(actor, delta, T).await
}

async fn eventually(what: &str, f: impl FnMut() -> bool) {
    support::eventually(what, T, f).await
}

/// Every child of every supervisor under the top one is running.
async fn all_running(rt: &Runtime) -> bool {
    let mut stack = vec![rt.top().clone()];
    while let Some(sup) = stack.pop() {
        let Ok(children) = sup.which_children().await else { return false };
        for c in children {
            if c.state != RunState::Running {
                return false;
            }
            stack.extend(SupervisorRef::from_child(&c.child));
        }
    }
    true
}

async fn converge(rt: &Runtime) {
    let deadline = Instant::now() + T;
    while !all_running(rt).await {
        assert!(Instant::now() < deadline, "the tree did not converge");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn a_wedged_actor_is_quarantined_and_its_child_moves_to_another_slot(on: On) {
    let rt = Runtime::start(config(&on), tree()).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let b = rt.gpu("app/b").unwrap();
    let old_slot = b.slot();
    assert_eq!(total(&b, 5).await.unwrap(), 5);
    assert_eq!(rt.faults().inject("app/b", InjectedFault::Wedge).unwrap(), 1);
    // Messages to the wedged actor: the watchdog sees them pending with a stale heartbeat and fails the
    // child; the kill its restart needs is never acknowledged; the slot is quarantined.
    for _ in 0..3 {
        b.send(&1i64.to_le_bytes()).unwrap();
    }
    let mut quarantined = None;
    let deadline = Instant::now() + T;
    while quarantined.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if let TreeEvent::SlotQuarantined { child, slot, to } =
            tokio::time::timeout(left, events.recv()).await.expect("quarantine reported").unwrap()
        {
            quarantined = Some((child, slot, to));
        }
    }
    let (child, slot, to) = quarantined.unwrap();
    assert_eq!((child.as_str(), slot), ("b", old_slot));
    let new_slot = to.expect("moved to a free slot");
    assert_ne!(new_slot, old_slot);
    assert_eq!(rt.services().quarantined_slots(), vec![old_slot]);
    assert!(rt.device().is_quarantined(old_slot));
    // The same handle reaches the new incarnation on the new slot, from fresh state.
    eventually("b running on its new slot", || b.status() == ChildStatus::Running && b.slot() == new_slot).await;
    assert_eq!(total(&b, 2).await.unwrap(), 2);
    // The three messages stuck in the wedged slot are dead letters, with the reason.
    let stuck: Vec<_> =
        rt.dead_letters().snapshot().into_iter().filter(|l| l.reason == DeadLetterReason::SlotQuarantined).collect();
    assert_eq!(stuck.len(), 3, "{stuck:?}");
    assert!(stuck.iter().all(|l| l.target.as_deref() == Some("app/b") && l.slot == Some(old_slot)));
    // The other children were not touched, and the slot is never handed out again on this device.
    assert_eq!(total(&rt.gpu("app/a").unwrap(), 1).await.unwrap(), 1);
    let before = rt.services().free_slots();
    rt.root().start_child(counter("d")).await.unwrap();
    assert_ne!(rt.gpu("app/d").unwrap().slot(), old_slot);
    assert_eq!(rt.services().free_slots(), before - 1);
    rt.shutdown().await;
}

/// A call to `actor` (a counter) whose message is in its slot's inbox when this returns; the call's own
/// deadline is long, so that what ends it is the system, not the deadline.
async fn call_queued_in(actor: &GpuActorRef) -> tokio::task::JoinHandle<Result<ringvisor::device::Reply, SendError>> {
    let (device, slot) = (actor.device(), actor.slot());
    let before = device.inbox_pending(slot).unwrap();
    let call = {
        let actor = actor.clone();
        tokio::spawn(async move { actor.call(&1i64.to_le_bytes(), Duration::from_secs(60)).await })
    };
    eventually("the call's message in the inbox", || device.inbox_pending(slot).unwrap() > before).await;
    call
}

/// Found by the chaos soak (seed 6151, 90 s): a call to a wedged actor whose supervisor was killed before it
/// noticed the wedge waited out its whole deadline: the kill the dying supervisor left behind was never
/// acknowledged, nobody looked again, and the slot went back to the pool with the message in it (a dynamic
/// child of a simple_one_for_one pool is not started again, so nobody took the slot and found it wedged). Now
/// the slot is settled: the unacknowledged kill with a still heartbeat gets it quarantined, and the call is a
/// dead letter.
async fn a_wedged_actor_whose_supervisor_is_killed_has_its_calls_dead_lettered(on: On) {
    let pool = SupervisorSpec::simple(
        ChildSpec::gpu("p", GpuChild::new("counter").heartbeat_timeout(Some(Duration::from_secs(30))))
            .name("app/pool/{id}"),
    )
    .intensity(10, Duration::from_secs(10));
    let tree = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(10, Duration::from_secs(10))
        .child(ChildSpec::supervisor("pool", pool).name("app/pool"));
    let rt = Runtime::start(config(&on), tree).await.unwrap();
    let pool = SupervisorRef::from_child(&rt.registry().lookup("app/pool").unwrap()).unwrap();
    pool.start_dynamic(Vec::new()).await.unwrap();
    let (name, _) = rt.find("app/pool/*").unwrap().pop().expect("the dynamic child");
    let p = rt.gpu(&name).unwrap();
    let slot = p.slot();
    assert_eq!(total(&p, 1).await.unwrap(), 1);
    assert_eq!(rt.faults().inject(&name, InjectedFault::Wedge).unwrap(), 1);
    // the watchdog would take 30 s: the supervisor is killed long before it notices
    let call = call_queued_in(&p).await;
    assert_eq!(rt.faults().inject("app/pool", InjectedFault::KillSupervisor).unwrap(), 1);
    let outcome = call.await.unwrap();
    assert!(
        matches!(outcome, Err(SendError::Undelivered { reason: DeadLetterReason::SlotQuarantined, .. })),
        "{outcome:?}"
    );
    assert!(rt.device().is_quarantined(slot));
    // the pool is back (empty: its dynamic children went with it), and the slot is never handed out again
    eventually("the pool running again", || {
        rt.registry().lookup("app/pool").is_some_and(|c| c.status() == ChildStatus::Running)
    })
    .await;
    let pool = SupervisorRef::from_child(&rt.registry().lookup("app/pool").unwrap()).unwrap();
    pool.start_dynamic(Vec::new()).await.unwrap();
    let (name, _) = rt.find("app/pool/*").unwrap().pop().expect("a new dynamic child");
    let p = rt.gpu(&name).unwrap();
    assert_ne!(p.slot(), slot);
    assert_eq!(total(&p, 2).await.unwrap(), 2);
    rt.shutdown().await;
}

/// The same for a child that ends for good while wedged (a temporary child the watchdog fails): its slot is
/// quarantined and the call queued there is a dead letter, instead of the slot going back to the pool with the
/// message in it.
async fn a_wedged_child_that_ends_for_good_has_its_calls_dead_lettered(on: On) {
    let tree = SupervisorSpec::new(Strategy::OneForOne).intensity(10, Duration::from_secs(10)).child(
        ChildSpec::gpu("t", GpuChild::new("counter").heartbeat_timeout(Some(Duration::from_millis(200))))
            .name("app/t")
            .restart(Restart::Temporary),
    );
    let rt = Runtime::start(config(&on), tree).await.unwrap();
    let t = rt.gpu("app/t").unwrap();
    let slot = t.slot();
    assert_eq!(total(&t, 1).await.unwrap(), 1);
    assert_eq!(rt.faults().inject("app/t", InjectedFault::Wedge).unwrap(), 1);
    let call = call_queued_in(&t).await;
    let outcome = call.await.unwrap();
    assert!(
        matches!(outcome, Err(SendError::Undelivered { reason: DeadLetterReason::SlotQuarantined, .. })),
        "{outcome:?}"
    );
    assert!(rt.device().is_quarantined(slot));
    assert!(rt.gpu("app/t").is_none(), "a temporary child is not restarted");
    rt.shutdown().await;
}

async fn a_lost_device_is_restarted_and_the_tree_is_created_again_on_the_new_kernel(on: On) {
    // Long enough that the call and the send below reach the halted kernel before it is declared lost, even on a
    // loaded machine (at 300 ms, a release run with this file's tests in parallel once declared it lost first:
    // the send was parked for the restarting child and counted as a dead target instead).
    let config = config(&on).lost_after(Some(Duration::from_millis(1500)));
    let rt = Runtime::builder().device(config).start(tree()).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let old_device = rt.device();
    let a = rt.gpu("app/a").unwrap();
    assert_eq!(total(&a, 7).await.unwrap(), 7);
    assert_eq!(rt.faults().inject("app/*", InjectedFault::LoseDevice).unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Messages sent to the halted kernel are not processed; they are handed back when it is declared lost.
    let lost_call = {
        let a = a.clone();
        tokio::spawn(async move { a.call(&1i64.to_le_bytes(), T).await })
    };
    a.send(&1i64.to_le_bytes()).unwrap();
    let outcome = lost_call.await.unwrap();
    assert!(matches!(outcome, Err(SendError::Undelivered { reason: DeadLetterReason::DeviceLost, .. })), "{outcome:?}");
    assert_eq!(old_device.health(), DeviceHealth::Lost);
    // One_for_all at the device level: the device child exits, the tree is stopped, both start again.
    let mut device_exit = None;
    let deadline = Instant::now() + T;
    while device_exit.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await.expect("device restart").unwrap() {
            TreeEvent::ChildExited { supervisor, child, reason, .. }
                if supervisor == TOP_SUPERVISOR && child == DEVICE_CHILD =>
            {
                device_exit = Some(reason)
            }
            _ => {}
        }
    }
    assert!(device_exit.unwrap().to_string().contains("device lost"));
    converge(&rt).await;
    let new_device = rt.device();
    assert_eq!(new_device.health(), DeviceHealth::Running);
    assert_eq!(old_device.health(), DeviceHealth::Lost, "the old device stays lost");
    // The names resolve to the children on the new device, from fresh state; the old handle is gone.
    let a2 = rt.gpu("app/a").unwrap();
    assert_eq!(total(&a2, 3).await.unwrap(), 3);
    assert_eq!(new_device.snapshot(a2.slot()).unwrap().state, SlotState::Active);
    assert!(matches!(a.send(&[0; 8]), Err(SendError::Gone { .. })));
    // Every message the lost device held is a dead letter with the reason.
    let lost = rt.dead_letters().stats().count(DeadLetterReason::DeviceLost);
    assert_eq!(lost, 2, "the call and the send: {}", rt.dead_letters().stats());
    rt.shutdown().await;
}

async fn too_many_quarantined_slots_restart_the_device(on: On) {
    let rt = Runtime::builder().device(config(&on)).quarantine_limit(1).start(tree()).await.unwrap();
    let old_device = rt.device();
    for name in ["app/a", "app/b"] {
        let actor = rt.gpu(name).unwrap();
        rt.faults().inject(name, InjectedFault::Wedge).unwrap();
        actor.send(&1i64.to_le_bytes()).unwrap();
    }
    // Two quarantined slots > limit 1: a new device comes up and the tree is created on it.
    eventually("a new device", || !rt.device().same_device(&old_device)).await;
    assert!(rt.services().quarantined_slots().is_empty(), "a new device has no quarantined slot");
    converge(&rt).await;
    for name in ["app/a", "app/b", "app/c"] {
        assert_eq!(total(&rt.gpu(name).unwrap(), 4).await.unwrap(), 4, "{name} on the new device");
    }
    rt.shutdown().await;
}

async fn a_short_executor_stall_is_ridden_out_without_restarts(on: On) {
    let rt = Runtime::start(config(&on), tree()).await.unwrap();
    let mut events = rt.services().events().subscribe();
    let a = rt.gpu("app/a").unwrap();
    assert_eq!(total(&a, 1).await.unwrap(), 1);
    // Longer than every child's heartbeat timeout (200 ms), shorter than the device's lost_after (3 s).
    rt.faults().inject("app/a", InjectedFault::StallDevice(Duration::from_millis(600))).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = Instant::now();
    assert_eq!(total(&a, 1).await.unwrap(), 2, "the call waits out the stall");
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(e) = events.try_recv() {
        assert!(!matches!(e, TreeEvent::ChildExited { .. } | TreeEvent::Restarting { .. }), "{e:?}");
    }
    rt.shutdown().await;
}

async fn a_device_that_keeps_dying_makes_the_runtime_give_up(on: On) {
    let config = config(&on).lost_after(Some(Duration::from_millis(200)));
    let rt = Runtime::builder().device(config).device_restarts(1, Duration::from_secs(60)).start(tree()).await.unwrap();
    let first = rt.device();
    rt.faults().inject("app/a", InjectedFault::LoseDevice).unwrap();
    eventually("a new device", || !rt.device().same_device(&first)).await;
    converge(&rt).await;
    assert_eq!(total(&rt.gpu("app/a").unwrap(), 1).await.unwrap(), 1, "the tree is back");
    // The second loss within the period exceeds the top supervisor's intensity (1): it shuts down.
    rt.faults().inject("app/a", InjectedFault::LoseDevice).unwrap();
    let end = tokio::time::timeout(T, rt.wait()).await.expect("the runtime gave up");
    assert_eq!(end, RuntimeEnd::DeviceGaveUp);
    assert!(!rt.is_running());
    assert!(rt.gpu("app/a").is_none(), "names are released");
}

on_every_backend!(
    a_wedged_actor_is_quarantined_and_its_child_moves_to_another_slot,
    a_wedged_actor_whose_supervisor_is_killed_has_its_calls_dead_lettered,
    a_wedged_child_that_ends_for_good_has_its_calls_dead_lettered,
    a_lost_device_is_restarted_and_the_tree_is_created_again_on_the_new_kernel,
    too_many_quarantined_slots_restart_the_device,
    a_short_executor_stall_is_ridden_out_without_restarts,
    a_device_that_keeps_dying_makes_the_runtime_give_up,
);
