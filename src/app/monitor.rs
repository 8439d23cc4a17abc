//! Watching a running tree: a [`Monitor`] follows tree events and dead letters and takes [`Snapshot`]s of
//! the whole tree (each child's state, generation, restarts, messages per second, heartbeat age), which
//! the live view draws and the progress lines summarise.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use ringvisor_device::{Device, DeviceHealth};
use ringvisor_supervisor::{ChildType, DeadLetter, DeadLetterStats, RunState, SupervisorRef, TreeEvent};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::Runtime;

/// What kind of child a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildKind {
    /// A supervisor (its children follow, one level deeper).
    Supervisor,
    /// A GPU actor (a slot on the device).
    Gpu,
    /// A host actor.
    Host,
}

/// One child of the tree, as last sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildRow {
    /// Nesting depth (children of the top supervisor are at 0).
    pub depth: usize,
    /// The child's id.
    pub id: String,
    /// Supervisor, GPU actor or host actor.
    pub kind: ChildKind,
    /// Its run state, as its supervisor reports it.
    pub state: RunState,
    /// The device slot (GPU actors).
    pub slot: Option<u32>,
    /// The incarnation on the device (GPU actors).
    pub generation: Option<u32>,
    /// Restarts seen since the monitor started.
    pub restarts: u64,
    /// Messages processed per second since the previous sample (GPU actors).
    pub msgs_per_sec: f64,
    /// How long since the device actor's heartbeat last moved (GPU actors).
    pub heartbeat_age: Option<Duration>,
}

/// The whole tree at one moment, with the dead letters and the recent events.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Since the monitor started.
    pub elapsed: Duration,
    /// The executor, in words.
    pub device: String,
    /// Whether the device answers.
    pub health: DeviceHealth,
    /// Every child, depth first in start order.
    pub rows: Vec<ChildRow>,
    /// Dead letters by reason.
    pub dead_letters: DeadLetterStats,
    /// The latest dead letters, described, newest last.
    pub recent_dead_letters: Vec<String>,
    /// The latest tree events, described, newest last.
    pub recent_events: Vec<String>,
    /// Restarts seen.
    pub restarts: u64,
    /// Supervisors that exceeded their intensity.
    pub escalations: u64,
    /// Messages processed per second over the whole device since the previous sample.
    pub msgs_per_sec: f64,
}

/// A device slot as last sampled.
struct SlotSample {
    generation: u32,
    heartbeat: u64,
    heartbeat_moved: Instant,
    processed: u64,
}

/// How many recent events and dead letters a snapshot keeps.
const RECENT: usize = 12;

/// Follows one runtime's tree.
pub struct Monitor {
    started: Instant,
    events: UnboundedReceiver<TreeEvent>,
    dead: UnboundedReceiver<DeadLetter>,
    recent_events: VecDeque<String>,
    recent_dead: VecDeque<String>,
    /// Children seen exiting and not started since, by (supervisor, child).
    exited: HashSet<(String, String)>,
    /// Restarts seen, by (supervisor, child).
    restarts_of: HashMap<(String, String), u64>,
    restarts: u64,
    escalations: u64,
    slots: HashMap<u32, SlotSample>,
    sampled_at: Instant,
    /// Events taken into account but not yet handed out by `take_events`.
    pending: Vec<TreeEvent>,
}

impl Monitor {
    /// Starts following `rt` (events from now on).
    pub fn new(rt: &Runtime) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            events: rt.services().events().subscribe(),
            dead: rt.dead_letters().subscribe(),
            recent_events: VecDeque::new(),
            recent_dead: VecDeque::new(),
            exited: HashSet::new(),
            restarts_of: HashMap::new(),
            restarts: 0,
            escalations: 0,
            slots: HashMap::new(),
            sampled_at: now,
            pending: Vec::new(),
        }
    }

    /// The tree events seen since the last call (for callers that print them), after taking every event
    /// and dead letter that arrived into account.
    pub fn take_events(&mut self) -> Vec<TreeEvent> {
        self.absorb();
        std::mem::take(&mut self.pending)
    }

    /// Takes the tree events and dead letters that arrived into account (the events are kept for
    /// [`Monitor::take_events`]).
    fn absorb(&mut self) {
        while let Ok(e) = self.events.try_recv() {
            match &e {
                // A start after an exit of the same child is a restart.
                TreeEvent::ChildExited { supervisor, child, .. } => {
                    self.exited.insert((supervisor.clone(), child.clone()));
                }
                TreeEvent::ChildStarted { supervisor, child, .. } => {
                    let key = (supervisor.clone(), child.clone());
                    if self.exited.remove(&key) {
                        *self.restarts_of.entry(key).or_default() += 1;
                    }
                }
                TreeEvent::Restarting { .. } => self.restarts += 1,
                TreeEvent::IntensityReached { .. } => self.escalations += 1,
                _ => {}
            }
            push_recent(&mut self.recent_events, describe_event(&e));
            self.pending.push(e);
        }
        while let Ok(letter) = self.dead.try_recv() {
            let target = letter.target.as_deref().unwrap_or("?");
            push_recent(
                &mut self.recent_dead,
                format!("{} -> {target} ({} bytes)", letter.reason.label(), letter.payload.len()),
            );
        }
    }

    /// Restarts seen so far, and escalations (after taking the events that arrived into account).
    pub fn counts(&mut self) -> (u64, u64) {
        self.absorb();
        (self.restarts, self.escalations)
    }

    /// Walks the tree from the top supervisor and samples every child.
    pub async fn sample(&mut self, rt: &Runtime) -> Snapshot {
        self.absorb();
        let now = Instant::now();
        let dt = now.duration_since(self.sampled_at).as_secs_f64().max(1e-3);
        self.sampled_at = now;
        let device = rt.device();
        let mut rows = Vec::new();
        let mut total_rate = 0.0;
        // Depth first, in start order: each supervisor's row is followed by its subtree.
        let mut work = vec![Walk::Expand(rt.top().clone(), crate::TOP_SUPERVISOR.to_string(), 0)];
        while let Some(item) = work.pop() {
            let (sup, sup_id, depth) = match item {
                Walk::Row(row) => {
                    rows.push(row);
                    continue;
                }
                Walk::Expand(sup, id, depth) => (sup, id, depth),
            };
            let Ok(children) = sup.which_children().await else { continue };
            let mut level = Vec::new();
            for c in children {
                let restarts = self.restarts_of.get(&(sup_id.clone(), c.id.clone())).copied().unwrap_or(0);
                let mut row = ChildRow {
                    depth,
                    id: c.id.clone(),
                    kind: ChildKind::Host,
                    state: c.state,
                    slot: None,
                    generation: None,
                    restarts,
                    msgs_per_sec: 0.0,
                    heartbeat_age: None,
                };
                let mut nested = None;
                if c.child_type == ChildType::Supervisor {
                    row.kind = ChildKind::Supervisor;
                    nested = SupervisorRef::from_child(&c.child).map(|s| Walk::Expand(s, c.id.clone(), depth + 1));
                } else if let Some(gpu) = c.child.gpu() {
                    row.kind = ChildKind::Gpu;
                    self.sample_slot(&mut row, gpu.device(), gpu.slot(), now, dt);
                    total_rate += row.msgs_per_sec;
                }
                level.push(Walk::Row(row));
                level.extend(nested);
            }
            work.extend(level.into_iter().rev());
        }
        let (restarts, escalations) = self.counts();
        Snapshot {
            elapsed: self.started.elapsed(),
            device: device.describe(),
            health: device.health(),
            rows,
            dead_letters: rt.dead_letters().stats(),
            recent_dead_letters: self.recent_dead.iter().cloned().collect(),
            recent_events: self.recent_events.iter().cloned().collect(),
            restarts,
            escalations,
            msgs_per_sec: total_rate,
        }
    }
}

/// A step of the tree walk: a row to emit, or a supervisor to list.
enum Walk {
    Row(ChildRow),
    Expand(SupervisorRef, String, usize),
}

impl Monitor {
    /// Fills a GPU child's row from its slot's control block.
    fn sample_slot(&mut self, row: &mut ChildRow, device: &Device, slot: u32, now: Instant, dt: f64) {
        row.slot = Some(slot);
        let Ok(snap) = device.snapshot(slot) else { return };
        let sample = self.slots.entry(slot).or_insert(SlotSample {
            generation: snap.generation,
            heartbeat: snap.heartbeat,
            heartbeat_moved: now,
            processed: snap.messages_processed,
        });
        if snap.heartbeat != sample.heartbeat || snap.generation != sample.generation {
            sample.heartbeat_moved = now;
        }
        let processed = if snap.generation == sample.generation {
            snap.messages_processed.saturating_sub(sample.processed)
        } else {
            snap.messages_processed // a new incarnation counts from zero
        };
        row.msgs_per_sec = processed as f64 / dt;
        row.generation = Some(snap.generation);
        row.heartbeat_age = Some(now.duration_since(sample.heartbeat_moved));
        sample.generation = snap.generation;
        sample.heartbeat = snap.heartbeat;
        sample.processed = snap.messages_processed;
    }
}

fn push_recent(q: &mut VecDeque<String>, line: String) {
    if q.len() == RECENT {
        q.pop_front();
    }
    q.push_back(line);
}

/// One line for a tree event.
pub fn describe_event(e: &TreeEvent) -> String {
    match e {
        TreeEvent::SupervisorStarted { supervisor } => format!("{supervisor}: started"),
        TreeEvent::ChildStarted { supervisor, child, .. } => format!("{supervisor}: {child} started"),
        TreeEvent::ChildStartFailed { supervisor, child, error, .. } => {
            format!("{supervisor}: {child} failed to start: {error}")
        }
        TreeEvent::ChildExited { supervisor, child, reason, .. } => format!("{supervisor}: {child} exited ({reason})"),
        TreeEvent::Restarting { supervisor, child } => format!("{supervisor}: restarting after {child}"),
        TreeEvent::SlotQuarantined { child, slot, to } => match to {
            Some(to) => format!("{child}: slot {slot} quarantined, moved to slot {to}"),
            None => format!("{child}: slot {slot} quarantined, no free slot"),
        },
        TreeEvent::IntensityReached { supervisor } => format!("{supervisor}: restart intensity reached, escalating"),
        TreeEvent::AutoShutdown { supervisor } => format!("{supervisor}: auto shutdown"),
        TreeEvent::SupervisorStopped { supervisor, reason, .. } => format!("{supervisor}: stopped ({reason})"),
    }
}
