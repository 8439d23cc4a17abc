//! Watching a running tree: a [`Monitor`] follows tree events and dead letters and takes [`Snapshot`]s of
//! the whole tree (each child's state, generation, restarts, messages per second, heartbeat age), which
//! the live view draws and the progress lines summarise.
//!
//! A snapshot does not ask every supervisor for every child: the monitor keeps each supervisor's listing
//! (`which_children`, asked once per supervisor incarnation) and reads each child's state from its stable
//! handle, which its supervisor keeps current. A listing is asked again only when its membership may have
//! changed: a tree event names a child it does not hold (a dynamic start, `start_child`), or a handle it
//! holds is gone for good (a temporary child ended, `delete_child`). A steady tree of 100,000 children costs
//! a sample one handle read and one control-block read per child, and its supervisors no message at all.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use ractor::ActorId;
use ringvisor_device::{Device, DeviceHealth};
use ringvisor_supervisor::{
    ChildInfo, ChildStatus, ChildType, DeadLetter, DeadLetterStats, RunState, SupervisorRef, TreeEvent,
};
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
    /// The device's index among the runtime's devices (GPU actors).
    pub device: Option<usize>,
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
    /// The runtime's devices, by index: each executor in words and whether it answers.
    pub devices: Vec<DeviceLine>,
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
    /// Messages processed per second over every device since the previous sample.
    pub msgs_per_sec: f64,
}

/// One of the runtime's devices in a [`Snapshot`].
#[derive(Clone, Debug)]
pub struct DeviceLine {
    /// The executor, in words.
    pub describe: String,
    /// Whether the device answers.
    pub health: DeviceHealth,
}

impl Snapshot {
    /// The devices' health in a few words: `Running` for one device, `[Running, Lost]` for several.
    pub fn health(&self) -> String {
        match self.devices.as_slice() {
            [one] => format!("{:?}", one.health),
            all => format!("{:?}", all.iter().map(|d| d.health).collect::<Vec<_>>()),
        }
    }
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

/// One supervisor incarnation's children as last listed (the status cache of the module doc).
struct Listing {
    /// The supervisor's id (tree events name supervisors by id).
    id: String,
    children: Vec<ChildInfo>,
    /// The ids in `children`, to tell a start of a new child from a restart.
    ids: HashSet<String>,
    /// Listed again at the next sample: its membership may have changed.
    stale: bool,
}

impl Listing {
    fn new(id: String, children: Vec<ChildInfo>) -> Self {
        let ids = children.iter().map(|c| c.id.clone()).collect();
        Self { id, children, ids, stale: false }
    }
}

/// A child's state as its supervisor would report it, from what its handle sees; `None` when the child is
/// gone for good (no longer among its supervisor's children).
fn run_state(status: ChildStatus) -> Option<RunState> {
    match status {
        ChildStatus::Running => Some(RunState::Running),
        ChildStatus::Starting | ChildStatus::Restarting => Some(RunState::Restarting),
        ChildStatus::Stopped => Some(RunState::Undefined),
        ChildStatus::Gone => None,
    }
}

/// Follows one runtime's tree.
pub struct Monitor {
    started: Instant,
    events: UnboundedReceiver<TreeEvent>,
    dead: UnboundedReceiver<DeadLetter>,
    recent_events: VecDeque<String>,
    recent_dead: VecDeque<String>,
    /// Children seen exiting and not started since, by (supervisor, child).
    exited: HashSet<(String, String)>,
    /// Restarts seen, by supervisor, then child (looked up by borrowed ids: no key built per row).
    restarts_of: HashMap<String, HashMap<String, u64>>,
    restarts: u64,
    escalations: u64,
    /// By slot.
    /// Each device's slots as last sampled, by device index, then slot.
    slots: Vec<Vec<Option<SlotSample>>>,
    /// Each supervisor incarnation's listing, by its actor.
    listings: HashMap<ActorId, Listing>,
    /// `which_children` calls made so far (a steady tree makes none).
    listings_asked: u64,
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
            slots: Vec::new(),
            listings: HashMap::new(),
            listings_asked: 0,
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
                    self.note_member(supervisor, child);
                    let key = (supervisor.clone(), child.clone());
                    if self.exited.remove(&key) {
                        *self.restarts_of.entry(key.0).or_default().entry(key.1).or_default() += 1;
                    }
                }
                TreeEvent::ChildStartFailed { supervisor, child, .. } => self.note_member(supervisor, child),
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

    /// Marks the listings of `supervisor` stale unless they hold `child` (a start of a child they do not
    /// know: `start_child`, a dynamic start).
    fn note_member(&mut self, supervisor: &str, child: &str) {
        for listing in self.listings.values_mut().filter(|l| l.id == supervisor) {
            listing.stale |= !listing.ids.contains(child);
        }
    }

    /// How many times the monitor asked a supervisor for its children (`which_children`) so far.
    pub fn listings_asked(&self) -> u64 {
        self.listings_asked
    }

    /// Restarts seen so far, and escalations (after taking the events that arrived into account).
    pub fn counts(&mut self) -> (u64, u64) {
        self.absorb();
        (self.restarts, self.escalations)
    }

    /// Walks the tree from the top supervisor and samples every child (see the module doc for what it asks).
    pub async fn sample(&mut self, rt: &Runtime) -> Snapshot {
        self.absorb();
        let now = Instant::now();
        let dt = now.duration_since(self.sampled_at).as_secs_f64().max(1e-3);
        self.sampled_at = now;
        let mut rows = Vec::new();
        let mut total_rate = 0.0;
        let mut visited = HashSet::new();
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
            let key = sup.actor().get_id();
            let Some(mut listing) = self.listing(&sup, key, sup_id).await else { continue };
            visited.insert(key);
            let mut level = Vec::new();
            for c in &listing.children {
                let Some(state) = run_state(c.child.status()) else {
                    listing.stale = true; // ended for good: its supervisor no longer lists it
                    continue;
                };
                let restarts = self.restarts_of.get(&listing.id).and_then(|of| of.get(&c.id)).copied().unwrap_or(0);
                let mut row = ChildRow {
                    depth,
                    id: c.id.clone(),
                    kind: ChildKind::Host,
                    state,
                    device: None,
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
                    let (index, device, slot) = gpu.location();
                    self.sample_slot(&mut row, index, &device, slot, now, dt);
                    total_rate += row.msgs_per_sec;
                }
                level.push(Walk::Row(row));
                level.extend(nested);
            }
            self.listings.insert(key, listing);
            work.extend(level.into_iter().rev());
        }
        // Supervisors that stopped (or were replaced by a restart) are not walked again.
        self.listings.retain(|key, _| visited.contains(key));
        let (restarts, escalations) = self.counts();
        Snapshot {
            elapsed: self.started.elapsed(),
            devices: rt.devices().iter().map(|d| DeviceLine { describe: d.describe(), health: d.health() }).collect(),
            rows,
            dead_letters: rt.dead_letters().stats(),
            recent_dead_letters: self.recent_dead.iter().cloned().collect(),
            recent_events: self.recent_events.iter().cloned().collect(),
            restarts,
            escalations,
            msgs_per_sec: total_rate,
        }
    }

    /// The listing of `sup` (taken out of the cache; the caller puts it back): the cached one unless it is
    /// stale, else asked anew. `None` when the supervisor does not answer (it stopped).
    async fn listing(&mut self, sup: &SupervisorRef, key: ActorId, id: String) -> Option<Listing> {
        match self.listings.remove(&key) {
            Some(listing) if !listing.stale => Some(listing),
            _ => {
                self.listings_asked += 1;
                sup.which_children().await.ok().map(|children| Listing::new(id, children))
            }
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
    fn sample_slot(&mut self, row: &mut ChildRow, index: usize, device: &Device, slot: u32, now: Instant, dt: f64) {
        row.device = Some(index);
        row.slot = Some(slot);
        let Ok(now_seen) = device.activity(slot) else { return };
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, Vec::new);
        }
        let samples = &mut self.slots[index];
        if samples.len() <= slot as usize {
            samples.resize_with(slot as usize + 1, || None);
        }
        let sample = samples[slot as usize].get_or_insert(SlotSample {
            generation: now_seen.generation,
            heartbeat: now_seen.heartbeat,
            heartbeat_moved: now,
            processed: now_seen.messages_processed,
        });
        if now_seen.heartbeat != sample.heartbeat || now_seen.generation != sample.generation {
            sample.heartbeat_moved = now;
        }
        let processed = if now_seen.generation == sample.generation {
            now_seen.messages_processed.saturating_sub(sample.processed)
        } else {
            now_seen.messages_processed // a new incarnation counts from zero
        };
        row.msgs_per_sec = processed as f64 / dt;
        row.generation = Some(now_seen.generation);
        row.heartbeat_age = Some(now.duration_since(sample.heartbeat_moved));
        sample.generation = now_seen.generation;
        sample.heartbeat = now_seen.heartbeat;
        sample.processed = now_seen.messages_processed;
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
        TreeEvent::DeviceMoved { child, from, to } => {
            format!("{child}: device {} lost (slot {}), moved to device {} slot {}", from.0, from.1, to.0, to.1)
        }
        TreeEvent::IntensityReached { supervisor, child } => {
            format!("{supervisor}: restart intensity reached by {child}, escalating")
        }
        TreeEvent::AutoShutdown { supervisor } => format!("{supervisor}: auto shutdown"),
        TreeEvent::SupervisorStopped { supervisor, reason, .. } => format!("{supervisor}: stopped ({reason})"),
    }
}
