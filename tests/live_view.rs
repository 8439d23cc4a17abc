//! The live view rendered into a ratatui test backend over a running tree.

use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use ringvisor::app::live;
use ringvisor::app::monitor::{ChildKind, Monitor};
use ringvisor::device::SlotFault;
use ringvisor::prelude::*;
use ringvisor::supervisor::RunState;

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
    assert!(cells.windows(3).any(|w| w == ["gpu", "running", &pump.slot().to_string()]), "{pump_line}");
    assert!(cells.windows(2).any(|w| w == ["2", "1"]), "generation 2, 1 restart: {pump_line}");
    assert!(row(&text, "v2").contains("running"));
    assert!(row(&text, "valves").contains("sup"));
    // The poison message is a dead letter; the events show the exit and the restart.
    assert!(text.contains("dead letters (1)") && text.contains("poison"), "{text}");
    assert!(text.contains("root: pump exited") && text.contains("root: pump started"), "{text}");
    rt.shutdown().await;
}
