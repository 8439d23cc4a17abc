//! The design card's shape (issue 36): a mirrored GPU child is a ractor actor to code written for ractor. A plain
//! ractor actor links to it, `call!`s it, sees it crash and restart through the supervisor, and finds the new
//! incarnation's mirror again by name (ractor's registry) and in a `pg` group. A mirror nothing else can find is
//! spawned when first asked for; mirroring is on by default, set per child or for a whole tree.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{call, cast, Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};
use ringvisor::device::DeviceConfig;
use ringvisor::prelude::*;
use ringvisor::supervisor::*;
use support::{small_runtime, test_msg};

const T: Duration = Duration::from_secs(10);
const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// Waits (up to `T`) until `f` gives a value.
async fn eventually<V>(what: &str, f: impl FnMut() -> Option<V>) -> V {
    support::eventually_some(what, T, f).await
}

/// A plain ractor actor that records the supervision events of the actors linked to it.
struct Watcher;

type Seen = Arc<Mutex<Vec<(ractor::ActorId, &'static str)>>>;

impl Actor for Watcher {
    type Msg = ();
    type State = Seen;
    type Arguments = Seen;

    async fn pre_start(&self, _: ActorRef<()>, seen: Seen) -> Result<Seen, ActorProcessingErr> {
        Ok(seen)
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<()>,
        event: SupervisionEvent,
        seen: &mut Seen,
    ) -> Result<(), ActorProcessingErr> {
        let what = match &event {
            SupervisionEvent::ActorFailed(..) => "failed",
            SupervisionEvent::ActorTerminated(..) => "terminated",
            _ => return Ok(()),
        };
        if let Some(who) = event.actor_cell() {
            seen.lock().unwrap().push((who.get_id(), what));
        }
        Ok(())
    }
}

/// Waits until the watcher has seen `who` end, and says how: "failed" or "terminated".
async fn seen_end(seen: &Seen, who: ractor::ActorId, what: &str) -> &'static str {
    eventually(what, || seen.lock().unwrap().iter().find(|(id, _)| *id == who).map(|(_, how)| *how)).await
}

fn named(name: &str) -> Option<ActorCell> {
    ractor::registry::where_is(name)
}

fn in_group(group: &str) -> Vec<ractor::ActorId> {
    ractor::pg::get_members(&group.to_string()).iter().map(ActorCell::get_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ractor_actor_links_to_a_mirrored_gpu_actor_calls_it_sees_it_crash_and_finds_it_again() {
    let child = GpuChild::new("test").init(POISON.to_le_bytes()).mirror_registered().mirror_group("mirror-test/echoes");
    let rt = small_runtime(vec![ChildSpec::gpu("e", child).name("mirror-test/e")]).await;
    let gpu = rt.gpu("mirror-test/e").expect("the child is registered");
    let first = eventually("the first mirror", || gpu.mirror()).await;
    assert_eq!(rt.root().which_children().await.unwrap()[0].child.actor().map(|a| a.get_id()), Some(first.get_id()));
    assert_eq!(named("mirror-test/e").map(|c| c.get_id()), Some(first.get_id()), "registered under its tree name");
    assert_eq!(in_group("mirror-test/echoes"), vec![first.get_id()]);

    let seen = Seen::default();
    let (watcher, _) = Actor::spawn(None, Watcher, seen.clone()).await.unwrap();
    first.get_cell().link(watcher.get_cell());

    // call! and cast! as to any ractor actor, answered from the device
    let answer =
        call!(first, GpuMessage::Call, test_msg(1, 0, 7)).expect("the mirror answers").expect("the device answers");
    assert_eq!(answer, test_msg(1, 0, 7));
    cast!(first, GpuMessage::Cast(test_msg(1, 0, 8))).unwrap();
    let state = call!(first, GpuMessage::State).unwrap().expect("a state read");
    assert_eq!(state.len(), 64);

    // a crash fails the mirror (the linked actor sees it) and the supervisor restarts the child with a new one
    gpu.send(&POISON.to_le_bytes()).unwrap();
    let failed = seen_end(&seen, first.get_id(), "the linked actor sees the crash").await;
    assert_eq!(failed, "failed");
    let second =
        eventually("the next incarnation's mirror", || gpu.mirror().filter(|m| m.get_id() != first.get_id())).await;
    let by_name = eventually("its name in ractor's registry", || {
        named("mirror-test/e").filter(|c| c.get_id() == second.get_id())
    })
    .await;
    assert_eq!(in_group("mirror-test/echoes"), vec![second.get_id()], "the group holds the new one only");
    let again = call!(ActorRef::<GpuMessage>::from(by_name), GpuMessage::Call, test_msg(1, 0, 9)).unwrap().unwrap();
    assert_eq!(again, test_msg(1, 0, 9));

    // a stop stops the mirror (no failure)
    second.get_cell().link(watcher.get_cell());
    rt.shutdown().await;
    let ended = seen_end(&seen, second.get_id(), "the stop").await;
    assert_eq!(ended, "terminated");
    assert!(named("mirror-test/e").is_none(), "the name is released with the mirror");
    watcher.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_childs_mirror_is_spawned_when_first_asked_for_and_ends_with_its_incarnation() {
    let child = GpuChild::new("test").init(POISON.to_le_bytes());
    let rt = small_runtime(vec![ChildSpec::gpu("d", child).name("mirror-test/d")]).await;
    let gpu = rt.gpu("mirror-test/d").unwrap();
    assert!(named("mirror-test/d").is_none(), "an on-demand mirror is not registered");
    // mirrored by default; asked for twice (and through its ChildRef), it is one actor
    let first = gpu.mirror().expect("a GPU child has a mirror by default");
    assert_eq!(gpu.mirror().map(|m| m.get_id()), Some(first.get_id()));
    assert_eq!(gpu.child().actor().map(|a| a.get_id()), Some(first.get_id()));
    assert_eq!(call!(first, GpuMessage::Call, test_msg(1, 0, 3)).unwrap().unwrap(), test_msg(1, 0, 3));

    let seen = Seen::default();
    let (watcher, _) = Actor::spawn(None, Watcher, seen.clone()).await.unwrap();
    first.get_cell().link(watcher.get_cell());
    gpu.send(&POISON.to_le_bytes()).unwrap();
    let failed = seen_end(&seen, first.get_id(), "the linked actor sees the crash").await;
    assert_eq!(failed, "failed");
    // the next incarnation's mirror is another actor, spawned when asked for
    let second =
        eventually("the next incarnation's mirror", || gpu.mirror().filter(|m| m.get_id() != first.get_id())).await;
    assert_eq!(call!(second, GpuMessage::Call, test_msg(1, 0, 4)).unwrap().unwrap(), test_msg(1, 0, 4));
    second.get_cell().link(watcher.get_cell());
    rt.shutdown().await;
    let stopped = seen_end(&seen, second.get_id(), "the mirror stops with the tree").await;
    assert_eq!(stopped, "terminated");
    assert!(gpu.mirror().is_none(), "a stopped child has no mirror");
    watcher.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirroring_is_set_per_child_or_for_a_whole_tree() {
    let gpu = |id: &str| ChildSpec::gpu(id, GpuChild::new("echo")).name(format!("mirror-test/{id}"));
    let nested = SupervisorSpec::new(Strategy::OneForOne).child(gpu("inner"));
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .mirrored(false)
        .child(gpu("plain"))
        .child(ChildSpec::gpu("asked", GpuChild::new("echo").mirrored(true)).name("mirror-test/asked"))
        .child(ChildSpec::supervisor("below", nested));
    let config = DeviceConfig::default().slots(8).state_bytes(64);
    let rt = Runtime::start(config, spec).await.unwrap();
    let plain = rt.gpu("mirror-test/plain").unwrap();
    assert!(plain.call(b"hi", T).await.is_ok());
    assert!(plain.mirror().is_none(), "the tree's default: not mirrored");
    assert!(plain.child().actor().is_none());
    assert!(rt.gpu("mirror-test/inner").unwrap().mirror().is_none(), "a supervisor below inherits the default");
    let asked = rt.gpu("mirror-test/asked").unwrap().mirror().expect("the child's own setting wins");
    assert_eq!(call!(asked, GpuMessage::Call, b"yo".to_vec()).unwrap().unwrap(), b"yo");
    rt.shutdown().await;

    // and the other way round: a mirrored tree, a child that opts out
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("off", GpuChild::new("echo").mirrored(false)).name("mirror-test/off"))
        .child(gpu("on"));
    let rt = Runtime::start(DeviceConfig::default().slots(8).state_bytes(64), spec).await.unwrap();
    assert!(rt.gpu("mirror-test/off").unwrap().mirror().is_none());
    assert!(rt.gpu("mirror-test/on").unwrap().mirror().is_some(), "mirrored by default");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_whose_name_is_taken_runs_unnamed() {
    let (holder, _) = Actor::spawn(Some("mirror-test/taken".to_string()), Watcher, Seen::default()).await.unwrap();
    let child = GpuChild::new("echo").mirror_registered();
    let rt = small_runtime(vec![ChildSpec::gpu("t", child).name("mirror-test/taken")]).await;
    let gpu = rt.gpu("mirror-test/taken").unwrap();
    let mirror = eventually("the mirror", || gpu.mirror()).await;
    assert_eq!(named("mirror-test/taken").map(|c| c.get_id()), Some(holder.get_id()), "the name stays its holder's");
    let answer = call!(mirror, GpuMessage::Call, b"still answers".to_vec()).unwrap().unwrap();
    assert_eq!(answer, b"still answers");
    rt.shutdown().await;
    holder.stop(None);
}
