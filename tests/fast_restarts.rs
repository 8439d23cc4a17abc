//! Restarts at device speed, observable behaviour: a group restart over GPU children is pipelined (every
//! stop issued before any is waited for, every start submitted before the first is waited for) and still
//! reports exits and starts in OTP's order; a failed start in a pipelined group start ends the sequence
//! where OTP would and takes back the starts submitted after it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use ringvisor::device::{DeviceConfig, Fault, SlotState};
use ringvisor::prelude::*;
use ringvisor::supervisor::*;
use tokio::sync::mpsc::UnboundedReceiver;

const T: Duration = Duration::from_secs(10);

fn config() -> DeviceConfig {
    DeviceConfig::default().slots(16).inbox_capacity(16).outbox_capacity(16).state_bytes(64)
}

/// A `test` behaviour message that fails the actor.
fn fail_msg() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    v.extend_from_slice(&[0; 12]);
    v
}

fn gpu(id: &str) -> ChildSpec {
    ChildSpec::gpu(id, GpuChild::new("test")).name(format!("app/{id}"))
}

/// A host actor child that counts its stops.
struct Host;
impl Actor for Host {
    type Msg = ();
    type State = Arc<AtomicU32>;
    type Arguments = Arc<AtomicU32>;
    async fn pre_start(&self, _: ActorRef<()>, stops: Arc<AtomicU32>) -> Result<Arc<AtomicU32>, ActorProcessingErr> {
        Ok(stops)
    }
    async fn post_stop(&self, _: ActorRef<()>, stops: &mut Arc<AtomicU32>) -> Result<(), ActorProcessingErr> {
        stops.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn host(id: &str, stops: Arc<AtomicU32>) -> ChildSpec {
    ChildSpec::actor(id, move |ctx: StartContext| {
        let stops = stops.clone();
        async move { ctx.spawn_linked(Host, stops).await }
    })
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The exits and starts (`-id` / `+id`) and failed starts (`!id`) of supervisor `root`, until `starts`
/// starts have been seen.
async fn trace(events: &mut UnboundedReceiver<TreeEvent>, starts: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = 0;
    while seen < starts {
        let event = tokio::time::timeout(T, events.recv()).await.expect("tree event").expect("events");
        match event {
            TreeEvent::ChildExited { supervisor, child, .. } if supervisor == "root" => out.push(format!("-{child}")),
            TreeEvent::ChildStartFailed { supervisor, child, .. } if supervisor == "root" => {
                out.push(format!("!{child}"))
            }
            TreeEvent::ChildStarted { supervisor, child, .. } if supervisor == "root" => {
                out.push(format!("+{child}"));
                seen += 1;
            }
            _ => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_one_for_all_restart_stops_gpu_siblings_together_and_reports_in_otp_order() {
    let stops = Arc::new(AtomicU32::new(0));
    let spec = SupervisorSpec::new(Strategy::OneForAll)
        .intensity(10, Duration::from_secs(5))
        .child(gpu("g0"))
        .child(gpu("g1"))
        .child(host("h", stops.clone()))
        .child(gpu("g3"))
        .child(gpu("g4").shutdown(Shutdown::Infinity));
    let rt = Runtime::builder().device(config()).root_id("root").start(spec).await.unwrap();
    let (g0, g1) = (rt.gpu("app/g0").unwrap(), rt.gpu("app/g1").unwrap());
    let (g3, g4) = (rt.gpu("app/g3").unwrap(), rt.gpu("app/g4").unwrap());
    // g4 cannot finish its drain while stalled with a message queued.
    rt.device().inject(g4.slot(), Fault::Stall).unwrap();
    g4.send(&1u32.to_le_bytes()).unwrap();
    let mut events = rt.services().events().subscribe();
    g0.send(&fail_msg()).unwrap();

    // g3's stop was issued with g4's, before g4 stopped: it drains while g4 is still stopping; the host child
    // h (before them in start order) is not asked to stop until both have, nor g1 (before h) until h has.
    eventually("g3 drained while g4 stops", || rt.device().host_view(g3.slot()).unwrap().1 == SlotState::Terminated)
        .await;
    assert_eq!(rt.device().host_view(g4.slot()).unwrap().1, SlotState::Draining, "g4 is still stopping");
    assert_eq!(stops.load(Ordering::SeqCst), 0, "h waits for the GPU children after it");
    assert_eq!(rt.device().host_view(g1.slot()).unwrap().1, SlotState::Active, "g1 waits for h");
    rt.device().inject(g4.slot(), Fault::ClearStall).unwrap();

    let got = trace(&mut events, 5).await;
    assert_eq!(got, ["-g0", "-g4", "-g3", "-h", "-g1", "+g0", "+g1", "+h", "+g3", "+g4"]);
    assert_eq!(stops.load(Ordering::SeqCst), 1);
    for name in ["app/g0", "app/g1", "app/g3", "app/g4"] {
        let actor = rt.gpu(name).unwrap();
        assert_eq!(rt.device().host_view(actor.slot()).unwrap().1, SlotState::Active, "{name} runs again");
        assert_eq!(actor.call(&1u32.to_le_bytes(), T).await.unwrap().payload().unwrap(), 1u32.to_le_bytes());
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_rest_for_one_restart_reports_exits_and_starts_in_otp_order() {
    let spec = (0..6).fold(SupervisorSpec::new(Strategy::RestForOne).intensity(10, Duration::from_secs(5)), |s, i| {
        s.child(gpu(&format!("g{i}")))
    });
    let rt = Runtime::builder().device(config()).root_id("root").start(spec).await.unwrap();
    let before: Vec<u32> = (0..6).map(|i| rt.device().host_view(i).unwrap().0).collect();
    let mut events = rt.services().events().subscribe();
    rt.gpu("app/g2").unwrap().send(&fail_msg()).unwrap();
    let got = trace(&mut events, 4).await;
    assert_eq!(got, ["-g2", "-g5", "-g4", "-g3", "+g2", "+g3", "+g4", "+g5"]);
    for i in 0..6 {
        let slot = rt.gpu(&format!("app/g{i}")).unwrap().slot();
        let (generation, state) = rt.device().host_view(slot).unwrap();
        assert_eq!(state, SlotState::Active);
        assert_eq!(generation > before[slot as usize], i >= 2, "g{i}: only g2 and after are new incarnations");
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_in_a_pipelined_group_start_ends_the_sequence_and_takes_back_the_later_starts() {
    // g1's second start fails (its init returns 1234); every other start succeeds.
    let g1 = GpuChild::new("test").init_with(|attempt| {
        let mut init = 0xDEAD_DEAD_DEAD_DEADu64.to_le_bytes().to_vec();
        init.extend_from_slice(&(if attempt == 2 { 1234u32 } else { 0 }).to_le_bytes());
        init
    });
    let spec = SupervisorSpec::new(Strategy::OneForAll)
        .intensity(10, Duration::from_secs(5))
        .child(gpu("g0"))
        .child(ChildSpec::gpu("g1", g1).name("app/g1"))
        .child(gpu("g2"))
        .child(gpu("g3"));
    let rt = Runtime::builder().device(config()).root_id("root").start(spec).await.unwrap();
    let slots: Vec<u32> = (0..4).map(|i| rt.gpu(&format!("app/g{i}")).unwrap().slot()).collect();
    let before: Vec<u32> = slots.iter().map(|s| rt.device().host_view(*s).unwrap().0).collect();
    let mut events = rt.services().events().subscribe();
    rt.gpu("app/g0").unwrap().send(&fail_msg()).unwrap();
    // The failed start of g1 ends the sequence: g2 and g3 are not started (the creates submitted for them
    // with the batch are killed); the retry (OTP's try_again_restart) restarts the whole group again.
    let got = trace(&mut events, 5).await;
    assert_eq!(got, ["-g0", "-g3", "-g2", "-g1", "+g0", "!g1", "-g0", "+g0", "+g1", "+g2", "+g3"]);
    for i in [2, 3] {
        let (generation, state) = rt.device().host_view(slots[i]).unwrap();
        assert_eq!(state, SlotState::Active, "g{i}");
        assert_eq!(generation, before[i] + 2, "g{i}: the taken-back incarnation, then the retry's");
    }
    let active = (0..16).filter(|s| rt.device().host_view(*s).unwrap().1 == SlotState::Active).count();
    assert_eq!(active, 4, "no incarnation left behind");
    rt.shutdown().await;
}
