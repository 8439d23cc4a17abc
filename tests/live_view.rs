//! The live view rendered into a ratatui test backend over a running tree.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use ringvisor::app::live;
use ringvisor::app::monitor::{ChildKind, Monitor, Snapshot};
use ringvisor::device::SlotFault;
use ringvisor::prelude::*;
use ringvisor::supervisor::{RunState, StartContext};
use tokio::sync::Notify;

const T: Duration = Duration::from_secs(10);

fn tree() -> SupervisorSpec {
    let worker = |id: &str| ChildSpec::gpu(id, GpuChild::new("counter")).name(format!("plant/{id}"));
    SupervisorSpec::new(Strategy::OneForOne).child(worker("pump")).child(ChildSpec::supervisor(
        "valves",
        SupervisorSpec::new(Strategy::OneForAll).child(worker("v1")).child(worker("v2")),
    ))
}

fn screen(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

/// The row of `id` on the screen.
fn row<'a>(screen: &'a str, id: &str) -> &'a str {
    screen.lines().find(|l| l.split_whitespace().any(|w| w == id)).unwrap_or_else(|| panic!("no row {id}:\n{screen}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_view_shows_the_tree_restarts_dead_letters_and_events() {
    let rt = Runtime::start(DeviceConfig::default().slots(8), tree()).await.unwrap();
    let mut monitor = Monitor::new(&rt);
    let pump = rt.gpu("plant/pump").unwrap();
    for _ in 0..20 {
        pump.call(&1i64.to_le_bytes(), T).await.unwrap();
    }
    rt.device().inject(pump.slot(), SlotFault::CrashNextMessage).unwrap();
    assert!(pump.call(&1i64.to_le_bytes(), T).await.is_err(), "the crash");
    let deadline = Instant::now() + T;
    let snap = loop {
        let snap = monitor.sample(&rt).await;
        let pump_row = snap.rows.iter().find(|r| r.id == "pump").unwrap();
        if pump_row.restarts == 1 && pump_row.state == RunState::Running {
            break snap;
        }
        assert!(Instant::now() < deadline, "restart not seen: {:?}", snap.rows);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The snapshot itself: the whole tree, depth first, each GPU child with its slot and generation.
    let ids: Vec<(&str, usize)> = snap.rows.iter().map(|r| (r.id.as_str(), r.depth)).collect();
    assert_eq!(ids, [("device", 0), ("root", 0), ("pump", 1), ("valves", 1), ("v1", 2), ("v2", 2)]);
    let pump_row = snap.rows.iter().find(|r| r.id == "pump").unwrap();
    assert_eq!((pump_row.kind, pump_row.generation), (ChildKind::Gpu, Some(2)));
    assert!(pump_row.heartbeat_age.is_some_and(|a| a < Duration::from_secs(2)));

    let mut terminal = Terminal::new(TestBackend::new(110, 30)).unwrap();
    terminal.draw(|f| live::draw(f, &snap, "test view")).unwrap();
    let text = screen(&terminal);
    assert!(text.contains("test view") && text.contains("supervision tree (6 children)"), "{text}");
    // pump: running, generation 2, 1 restart.
    let pump_line = row(&text, "pump");
    let cells: Vec<&str> = pump_line.split_whitespace().collect();
    assert!(cells.windows(4).any(|w| w == ["gpu", "running", "0", &pump.slot().to_string()]), "{pump_line}");
    assert!(cells.windows(2).any(|w| w == ["2", "1"]), "generation 2, 1 restart: {pump_line}");
    assert!(row(&text, "v2").contains("running"));
    assert!(row(&text, "valves").contains("sup"));
    // The poison message is a dead letter; the events show the exit and the restart.
    assert!(text.contains("dead letters (1)") && text.contains("poison"), "{text}");
    assert!(text.contains("root: pump exited") && text.contains("root: pump started"), "{text}");

    // A terminal too short for the tree: the rows that fit, and the title says so.
    let mut short = Terminal::new(TestBackend::new(110, 20)).unwrap();
    short.draw(|f| live::draw(f, &snap, "test view")).unwrap();
    let text = screen(&short);
    assert!(text.contains("supervision tree (6 children, the first 5 shown)"), "{text}");
    assert!(row(&text, "v1").contains("running") && !text.lines().any(|l| l.contains(" v2 ")), "{text}");
    rt.shutdown().await;
}

/// A host actor with nothing to do.
struct Idle;
impl ractor::Actor for Idle {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ractor::ActorRef<()>, _: ()) -> Result<(), ractor::ActorProcessingErr> {
        Ok(())
    }
}

/// A host child whose start announces itself on `entered` and then waits for `gate`: while it starts, its
/// supervisor handles nothing else.
fn gated_child(id: &str, entered: Arc<Notify>, gate: Arc<Notify>) -> ChildSpec {
    ChildSpec::actor(id, move |ctx: StartContext| {
        let (entered, gate) = (entered.clone(), gate.clone());
        async move {
            entered.notify_one();
            gate.notified().await;
            ctx.spawn_linked(Idle, ()).await
        }
    })
}

fn ids(snap: &Snapshot) -> Vec<&str> {
    snap.rows.iter().map(|r| r.id.as_str()).collect()
}

/// Samples until `done` holds for a snapshot (or fails after `T`).
async fn sample_until(monitor: &mut Monitor, rt: &Runtime, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + T;
    loop {
        let snap = monitor.sample(rt).await;
        if done(&snap) {
            return snap;
        }
        assert!(Instant::now() < deadline, "{what}: {:?}", snap.rows);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_lists_each_supervisor_once_and_again_only_when_its_children_change() {
    let rt = Runtime::start(DeviceConfig::default().slots(16), tree()).await.unwrap();
    let mut monitor = Monitor::new(&rt);
    let first = monitor.sample(&rt).await;
    assert_eq!(ids(&first), ["device", "root", "pump", "valves", "v1", "v2"]);
    assert_eq!(monitor.listings_asked(), 3, "the top supervisor, root and valves");

    // A restart changes states, not membership: the handles tell it, no supervisor is asked.
    let pump = rt.gpu("plant/pump").unwrap();
    rt.device().inject(pump.slot(), SlotFault::CrashNextMessage).unwrap();
    assert!(pump.call(&1i64.to_le_bytes(), T).await.is_err(), "the crash");
    let pump_restarted =
        |s: &Snapshot| s.rows.iter().any(|r| r.id == "pump" && r.restarts == 1 && r.state == RunState::Running);
    sample_until(&mut monitor, &rt, "pump restarted", pump_restarted).await;
    assert_eq!(monitor.listings_asked(), 3);

    // While root is busy starting a child, a sample still answers (from the cache).
    let (entered, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let root = rt.root();
    let starting = tokio::spawn({
        let (root, spec) = (root.clone(), gated_child("slow", entered.clone(), gate.clone()));
        async move { root.start_child(spec).await }
    });
    entered.notified().await;
    let during = tokio::time::timeout(T, monitor.sample(&rt)).await.expect("a sample while root is busy");
    assert_eq!(ids(&during), ["device", "root", "pump", "valves", "v1", "v2"]);
    gate.notify_one();
    starting.await.unwrap().expect("the slow child starts");
    // The start of a child root's listing does not hold: root is listed again.
    let with_slow = sample_until(&mut monitor, &rt, "slow listed", |s| ids(s).contains(&"slow")).await;
    assert_eq!(ids(&with_slow), ["device", "root", "pump", "valves", "v1", "v2", "slow"]);
    assert_eq!(monitor.listings_asked(), 4);

    // Terminated: still listed, undefined (its spec is kept). Deleted: gone from the next sample on.
    root.terminate_child("slow").await.unwrap();
    let stopped = monitor.sample(&rt).await;
    assert_eq!(stopped.rows.iter().find(|r| r.id == "slow").map(|r| r.state), Some(RunState::Undefined));
    root.delete_child("slow").await.unwrap();
    assert_eq!(ids(&monitor.sample(&rt).await), ["device", "root", "pump", "valves", "v1", "v2"]);
    assert_eq!(monitor.listings_asked(), 4, "a deleted child's handle says so; the re-listing comes next");
    monitor.sample(&rt).await;
    assert_eq!(monitor.listings_asked(), 5);

    // A restarted nested supervisor is a new incarnation with new children: listed afresh.
    root.terminate_child("valves").await.unwrap();
    let down = monitor.sample(&rt).await;
    assert_eq!(ids(&down), ["device", "root", "pump", "valves"], "valves is down, its children with it");
    root.restart_child("valves").await.unwrap();
    let back = sample_until(&mut monitor, &rt, "valves back", |s| ids(s).contains(&"v2")).await;
    assert_eq!(ids(&back), ["device", "root", "pump", "valves", "v1", "v2"]);
    assert_eq!(monitor.listings_asked(), 6);
    rt.shutdown().await;
}

/// Two children in the same slot number of two devices: the monitor samples each device's slots apart (a
/// message rate and a restart on one device never show on the other), and the snapshot lists both devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_keeps_the_devices_of_a_runtime_apart() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("a", GpuChild::new("counter").device(0)).name("two/a"))
        .child(ChildSpec::gpu("b", GpuChild::new("counter").device(1)).name("two/b"));
    let config = DeviceConfig::default().slots(4);
    let rt = Runtime::builder().devices([config.clone(), config]).start(spec).await.unwrap();
    let (a, b) = (rt.gpu("two/a").unwrap(), rt.gpu("two/b").unwrap());
    assert_eq!((a.location().0, b.location().0), (0, 1));
    assert_eq!(a.slot(), b.slot(), "the same slot number on both devices");
    let mut monitor = Monitor::new(&rt);
    monitor.sample(&rt).await;
    for _ in 0..50 {
        a.call(&1i64.to_le_bytes(), T).await.unwrap();
    }
    rt.device_at(1).unwrap().inject(b.slot(), SlotFault::CrashNextMessage).unwrap();
    assert!(b.call(&1i64.to_le_bytes(), T).await.is_err(), "the crash");
    let deadline = Instant::now() + T;
    let snap = loop {
        let snap = monitor.sample(&rt).await;
        let b_row = snap.rows.iter().find(|r| r.id == "b").unwrap();
        if b_row.generation == Some(2) && b_row.state == RunState::Running {
            break snap;
        }
        assert!(Instant::now() < deadline, "restart not seen: {:?}", snap.rows);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let row_of = |id: &str| snap.rows.iter().find(|r| r.id == id).unwrap();
    assert_eq!((row_of("a").device, row_of("a").generation), (Some(0), Some(1)));
    assert_eq!((row_of("b").device, row_of("b").generation), (Some(1), Some(2)));
    assert_eq!(snap.devices.len(), 2);
    assert_eq!(snap.health(), "[Running, Running]");
    assert!(ringvisor::app::report::progress_line(&snap).contains("devices [Running, Running]"));
    rt.shutdown().await;
}
