//! How the command reports: a plain progress line per second when the output is not a terminal, one JSON
//! object per line with `--json`, and the summaries at the end.

use std::fmt::Write as _;

use ringvisor_supervisor::{DeadLetterReason, DeadLetterStats, TreeEvent};
use serde_json::{json, Value};

use super::demo::DemoSummary;
use super::monitor::{describe_event, ChildKind, Snapshot};
use ringvisor_supervisor::RunState;

/// Where the command writes while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The live view (a terminal).
    Live,
    /// A progress line per second (not a terminal).
    Lines,
    /// One JSON object per line: tree events, progress, the summary.
    Json,
}

impl Output {
    /// `--json` wins; otherwise the live view on a terminal, progress lines elsewhere.
    pub fn choose(json: bool, plain: bool) -> Self {
        use std::io::IsTerminal;
        if json {
            Self::Json
        } else if plain || !std::io::stdout().is_terminal() {
            Self::Lines
        } else {
            Self::Live
        }
    }
}

/// Children running / all, GPU actors among them.
fn counts(snap: &Snapshot) -> (usize, usize, usize) {
    let running = snap.rows.iter().filter(|r| r.state == RunState::Running).count();
    let gpu = snap.rows.iter().filter(|r| r.kind == ChildKind::Gpu).count();
    (running, snap.rows.len(), gpu)
}

/// One progress line.
pub fn progress_line(snap: &Snapshot) -> String {
    let (running, all, gpu) = counts(snap);
    format!(
        "[{:>6.1}s] children running {running}/{all} ({gpu} GPU actors)  {:.0} msg/s  restarts {}  escalations {}  dead letters {}  {} {}",
        snap.elapsed.as_secs_f64(),
        snap.msgs_per_sec,
        snap.restarts,
        snap.escalations,
        snap.dead_letters.total(),
        if snap.devices.len() == 1 { "device" } else { "devices" },
        snap.health()
    )
}

fn dead_letters_json(stats: &DeadLetterStats) -> Value {
    let mut m = serde_json::Map::new();
    for r in DeadLetterReason::ALL {
        m.insert(r.label().into(), json!(stats.count(r)));
    }
    Value::Object(m)
}

/// A progress record for `--json`.
pub fn progress_json(snap: &Snapshot) -> Value {
    let (running, all, gpu) = counts(snap);
    json!({
        "type": "progress",
        "elapsed_s": snap.elapsed.as_secs_f64(),
        "children": all,
        "running": running,
        "gpu_actors": gpu,
        "msgs_per_sec": snap.msgs_per_sec,
        "restarts": snap.restarts,
        "escalations": snap.escalations,
        "dead_letters": dead_letters_json(&snap.dead_letters),
        "device": snap.health(),
    })
}

/// A tree event for `--json`.
pub fn event_json(e: &TreeEvent) -> Value {
    let (kind, supervisor, child) = match e {
        TreeEvent::SupervisorStarted { supervisor } => ("supervisor_started", Some(supervisor), None),
        TreeEvent::ChildStarted { supervisor, child, .. } => ("child_started", Some(supervisor), Some(child)),
        TreeEvent::ChildStartFailed { supervisor, child, .. } => ("child_start_failed", Some(supervisor), Some(child)),
        TreeEvent::ChildExited { supervisor, child, .. } => ("child_exited", Some(supervisor), Some(child)),
        TreeEvent::Restarting { supervisor, child } => ("restarting", Some(supervisor), Some(child)),
        TreeEvent::SlotQuarantined { child, .. } => ("slot_quarantined", None, Some(child)),
        TreeEvent::DeviceMoved { child, .. } => ("device_moved", None, Some(child)),
        TreeEvent::IntensityReached { supervisor, child } => ("intensity_reached", Some(supervisor), Some(child)),
        TreeEvent::AutoShutdown { supervisor } => ("auto_shutdown", Some(supervisor), None),
        TreeEvent::SupervisorStopped { supervisor, .. } => ("supervisor_stopped", Some(supervisor), None),
    };
    json!({ "type": "event", "event": kind, "supervisor": supervisor, "child": child, "text": describe_event(e) })
}

/// The demo's summary, in words.
pub fn demo_text(s: &DemoSummary) -> String {
    let mut t = String::new();
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(t, "ringvisor demo: {} sensors for {:.1} s", s.sensors, secs);
    let _ = writeln!(t, "  readings handed to sensors   {:>10}  ({:.0}/s)", s.readings, s.readings as f64 / secs);
    let _ = writeln!(t, "  processed by sensors         {:>10}", s.processed);
    let _ = writeln!(t, "  not sent (inbox full)        {:>10}", s.skipped);
    let _ = writeln!(t, "  anomalies planted            {:>10}", s.planted);
    let _ = writeln!(t, "    detected                   {:>10}", s.detected);
    let _ = writeln!(
        t,
        "    missed: sensor warming up  {:>10}  (after a restart its statistics start over)",
        s.missed_warmup
    );
    let _ = writeln!(t, "    missed: within threshold   {:>10}", s.missed_below);
    let _ = writeln!(t, "    dead letters               {:>10}", s.planted_dead_lettered);
    let _ = writeln!(t, "  false alarms                 {:>10}", s.false_alarms);
    let faults: u64 = s.faults.values().sum();
    let kinds: Vec<String> = s.faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(t, "  faults injected              {:>10}  ({})", faults, kinds.join(", "));
    let _ = writeln!(t, "  restarts                     {:>10}", s.restarts);
    let _ = writeln!(t, "  escalations                  {:>10}", s.escalations);
    let by_reason: Vec<String> = DeadLetterReason::ALL
        .iter()
        .filter(|r| s.dead_letters.count(**r) > 0)
        .map(|r| format!("{} {}", r.label(), s.dead_letters.count(*r)))
        .collect();
    let _ = writeln!(t, "  dead letters                 {:>10}  ({})", s.dead_letters.total(), by_reason.join(", "));
    if s.nothing_lost() {
        let _ = writeln!(t, "  every reading was processed or is a dead letter with its reason: nothing lost");
    } else {
        let _ =
            writeln!(t, "  LOST: {} readings and {} planted anomalies unaccounted for", s.lost, s.planted_unaccounted);
    }
    t
}

/// The demo's summary for `--json`.
pub fn demo_json(s: &DemoSummary) -> Value {
    json!({
        "type": "summary",
        "elapsed_s": s.elapsed.as_secs_f64(),
        "sensors": s.sensors,
        "readings": s.readings,
        "processed": s.processed,
        "skipped": s.skipped,
        "planted": s.planted,
        "detected": s.detected,
        "missed_warmup": s.missed_warmup,
        "missed_below": s.missed_below,
        "planted_dead_lettered": s.planted_dead_lettered,
        "false_alarms": s.false_alarms,
        "faults": s.faults,
        "restarts": s.restarts,
        "escalations": s.escalations,
        "dead_letters": dead_letters_json(&s.dead_letters),
        "lost": s.lost,
        "planted_unaccounted": s.planted_unaccounted,
        "nothing_lost": s.nothing_lost(),
    })
}
