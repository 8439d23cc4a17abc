//! The hung-actor detector of every GPU child on one device: one task per device, not one timer per child, so
//! a tree of 100,000 children costs one wake-up per tick, not 100,000 messages.
//!
//! A running incarnation is *hung* when its heartbeat has not moved for its timeout while messages wait in its
//! inbox, and *ended unheard* when the device shows it ended (Failed, Terminated, or a newer generation: block 0
//! restarted it under a grant) for a whole timeout without an event reaching the host. Either is sent to the
//! child's supervisor as a [`Notice::Hung`]: the incarnation exits with that reason and its supervisor acts. While the whole
//! device is unresponsive (block 0's heartbeat stale too) no slot is blamed: that is the device's watchdog's
//! call. An idle actor is never stepped (see the CPU backend's run set), so its heartbeat stands still: only
//! the time with work pending counts.
//!
//! A look at a slot costs two loads (its inbox's head and tail) when nothing waits there; the heartbeat is
//! read only for a slot with messages waiting, and the device's own state (has the incarnation ended?) every
//! [`ENDED_EVERY`] ticks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ringvisor_device::{Device, DeviceHealth, SlotState, UNRESPONSIVE_AFTER};

use super::{Notice, NoticeSink, SlotNotice};
use crate::rounded::Rounded;
use crate::sync::lock;

/// Longest time between two looks at the same slot (a child's timeout / 4 is used when shorter).
const MAX_TICK: Duration = Duration::from_millis(250);
/// Shortest time between two looks.
const MIN_TICK: Duration = Duration::from_millis(5);
/// Every how many ticks the device's state of each slot is read (an ended incarnation is reported after its
/// timeout, so a look every timeout is enough).
const ENDED_EVERY: u64 = 4;

/// The watched incarnations of one device, indexed by slot.
pub(crate) struct Watchdogs {
    /// The device's identity in the notices it sends (see [`SlotNotice::device`]).
    device: u64,
    watched: Mutex<Vec<Option<Watched>>>,
    ticks: AtomicU64,
    /// Nanoseconds between ticks: a quarter of the shortest timeout watched so far, within the bounds above.
    tick_ns: AtomicU64,
    started: AtomicBool,
}

impl Watchdogs {
    /// The watchdogs of the device whose notices carry `device`.
    pub(crate) fn new(device: u64) -> Self {
        Self {
            device,
            watched: Mutex::default(),
            ticks: AtomicU64::new(0),
            tick_ns: AtomicU64::new(MAX_TICK.as_nanos() as u64),
            started: AtomicBool::new(false),
        }
    }
}

/// What the detector keeps about one incarnation.
struct Watched {
    sink: NoticeSink,
    child: String,
    generation: u32,
    timeout: Duration,
    /// The heartbeat last seen, and since when it has not moved while work was pending.
    heartbeat: u64,
    since: Instant,
    /// Since when the device has shown this incarnation ended without the host hearing.
    ended_since: Option<Instant>,
}

impl Watchdogs {
    /// Watches incarnation `generation` of `slot` (of child `child`, whose supervisor hears through `sink`),
    /// with `timeout`. Starts the device's detector task on first use (from within the tokio runtime); `device`
    /// gives it the device while the tree still uses it (the task holds no device of its own).
    pub(crate) fn watch(
        self: &Arc<Self>,
        device: impl Fn() -> Option<Device> + Send + 'static,
        slot: u32,
        generation: u32,
        timeout: Duration,
        sink: NoticeSink,
        child: String,
    ) {
        self.shorten_tick_for(timeout);
        let entry =
            Watched { sink, child, generation, timeout, heartbeat: 0, since: Instant::now(), ended_since: None };
        let mut watched = lock(&self.watched);
        let index = slot as usize;
        if watched.len() <= index {
            watched.resize_with(index + 1, || None);
        }
        watched[index] = Some(entry);
        drop(watched);
        if !self.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(run(Arc::downgrade(self), device));
        }
    }

    /// Stops watching `slot` if incarnation `generation` is still the one watched there.
    pub(crate) fn unwatch(&self, slot: u32, generation: u32) {
        if let Some(entry) = lock(&self.watched).get_mut(slot as usize) {
            if entry.as_ref().is_some_and(|w| w.generation == generation) {
                *entry = None;
            }
        }
    }

    /// Makes the tick at most a quarter of `timeout` (within the bounds above).
    fn shorten_tick_for(&self, timeout: Duration) {
        let tick = (timeout / 4).clamp(MIN_TICK, MAX_TICK).as_nanos() as u64;
        self.tick_ns.fetch_min(tick, Ordering::Relaxed);
    }

    fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns.load(Ordering::Relaxed))
    }

    /// One look at every watched slot; a verdict goes to the child's supervisor, and the slot stops being
    /// watched.
    fn check_all(&self, device: &Device) {
        let device_stalled = device.heartbeat_age() >= UNRESPONSIVE_AFTER.min(self.tick() * 2);
        let device_down = device_stalled || device.health() == DeviceHealth::Lost;
        let now = Instant::now();
        let read_state = self.ticks.fetch_add(1, Ordering::Relaxed).is_multiple_of(ENDED_EVERY);
        let mut verdicts = Vec::new();
        let mut watched = lock(&self.watched);
        for (slot, entry) in watched.iter_mut().enumerate() {
            let Some(w) = entry else { continue };
            if device_down {
                w.since = now;
                w.ended_since = None;
                continue;
            }
            if let Some(reason) = w.check(device, slot as u32, now, read_state) {
                verdicts.push((slot as u32, entry.take(), reason));
            }
        }
        drop(watched);
        for (slot, watched, reason) in verdicts {
            metrics::counter!("ringvisor_watchdog_trips_total").increment(1);
            tracing::warn!(slot, %reason, "GPU actor watchdog");
            if let Some(w) = watched {
                (w.sink)(SlotNotice {
                    device: self.device,
                    slot,
                    generation: w.generation,
                    what: Notice::Hung(reason),
                });
            }
        }
    }
}

impl Watched {
    /// The verdict on this incarnation at `now`, if any; `read_state`: look at the device's state too.
    fn check(&mut self, device: &Device, slot: u32, now: Instant, read_state: bool) -> Option<String> {
        let ended = if read_state || self.ended_since.is_some() {
            let (generation, state) = device.lifecycle(slot).ok()?;
            let ended = generation != self.generation || matches!(state, SlotState::Failed | SlotState::Terminated);
            match (ended, self.ended_since) {
                (false, _) => self.ended_since = None,
                (true, None) => self.ended_since = Some(now),
                (true, Some(t)) if now.duration_since(t) >= self.timeout => {
                    return Some(format!(
                        "GPU actor `{}` (slot {slot}) ended ({state:?}) and no event told the host",
                        self.child
                    ));
                }
                (true, Some(_)) => {}
            }
            ended
        } else {
            false
        };
        let pending = device.inbox_pending(slot).ok()?;
        if pending == 0 {
            self.since = now;
            return None;
        }
        let snap = device.snapshot(slot).ok()?;
        if ended || snap.generation != self.generation || snap.heartbeat != self.heartbeat {
            self.heartbeat = snap.heartbeat;
            self.since = now;
            return None;
        }
        let stale = now.duration_since(self.since);
        (stale >= self.timeout).then(|| {
            format!(
                "GPU actor `{}` (slot {slot}) hung: heartbeat stale for {} with {pending} messages pending",
                self.child,
                Rounded(stale)
            )
        })
    }
}

/// The detector task of one device: ends when the device's tree state (which owns the watchdogs) is gone.
async fn run(watchdogs: Weak<Watchdogs>, device: impl Fn() -> Option<Device>) {
    loop {
        let tick = match watchdogs.upgrade() {
            Some(w) => w.tick(),
            None => return,
        };
        tokio::time::sleep(tick).await;
        let (Some(w), Some(device)) = (watchdogs.upgrade(), device()) else { return };
        w.check_all(&device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_a_quarter_of_the_shortest_timeout_within_bounds() {
        let w = Watchdogs::new(0);
        assert_eq!(w.tick(), MAX_TICK, "nothing watched yet");
        w.shorten_tick_for(Duration::from_secs(1));
        assert_eq!(w.tick(), MAX_TICK);
        w.shorten_tick_for(Duration::from_millis(200));
        assert_eq!(w.tick(), Duration::from_millis(50));
        w.shorten_tick_for(Duration::from_secs(2));
        assert_eq!(w.tick(), Duration::from_millis(50), "a longer timeout does not lengthen it");
        w.shorten_tick_for(Duration::from_millis(1));
        assert_eq!(w.tick(), MIN_TICK);
    }
}
