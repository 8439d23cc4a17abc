//! The hung-actor detector of every GPU child on one device: one task per device, not one timer per child, so
//! a tree of 100,000 children costs one wake-up per tick, not 100,000 messages.
//!
//! A running incarnation is *hung* when its heartbeat has not moved for its timeout while messages wait in its
//! inbox, and *ended unheard* when the device shows it ended (Failed, Terminated, or a newer generation: block 0
//! restarted it under a grant) for a whole timeout without an event reaching the host. Either is sent to the
//! slot actor as [`SlotMsg::Hung`], which fails with that reason so its supervisor acts. While the whole
//! device is unresponsive (block 0's heartbeat stale too) no slot is blamed: that is the device's watchdog's
//! call. An idle actor is never stepped (see the CPU backend's run set), so its heartbeat stands still: only
//! the time with work pending counts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ractor::ActorRef;
use ringvisor_device::{Device, DeviceHealth, SlotState, UNRESPONSIVE_AFTER};

use super::slots::{DeviceSlots, SlotMsg};

/// Longest time between two looks at the same slot (a child's timeout / 4 is used when shorter).
const MAX_TICK: Duration = Duration::from_millis(250);
/// Shortest time between two looks.
const MIN_TICK: Duration = Duration::from_millis(5);

/// The watched incarnations of one device, by slot.
#[derive(Default)]
pub(crate) struct Watchdogs {
    watched: DashMap<u32, Watched>,
    /// Nanoseconds between ticks: a quarter of the shortest timeout watched so far, within the bounds above.
    tick_ns: AtomicU64,
    started: AtomicBool,
}

/// What the detector keeps about one incarnation.
struct Watched {
    actor: ActorRef<SlotMsg>,
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
    /// Watches incarnation `generation` of `slot`, run by `actor` (the slot actor of child `child`), with
    /// `timeout`. Starts the device's detector task on first use (from within the tokio runtime).
    pub(crate) fn watch(
        &self,
        slots: Weak<DeviceSlots>,
        slot: u32,
        generation: u32,
        timeout: Duration,
        actor: ActorRef<SlotMsg>,
        child: String,
    ) {
        let tick = (timeout / 4).clamp(MIN_TICK, MAX_TICK).as_nanos() as u64;
        self.tick_ns.fetch_min(tick, Ordering::Relaxed);
        self.watched.insert(
            slot,
            Watched { actor, child, generation, timeout, heartbeat: 0, since: Instant::now(), ended_since: None },
        );
        if !self.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(run(slots));
        }
    }

    /// Stops watching `slot` if `actor` is still the one watched there.
    pub(crate) fn unwatch(&self, slot: u32, actor: &ActorRef<SlotMsg>) {
        self.watched.remove_if(&slot, |_, w| w.actor.get_id() == actor.get_id());
    }

    fn tick(&self) -> Duration {
        match self.tick_ns.load(Ordering::Relaxed) {
            0 => MAX_TICK,
            ns => Duration::from_nanos(ns),
        }
    }

    /// One look at every watched slot; a verdict goes to the slot actor, which stops being watched.
    fn check_all(&self, device: &Device) {
        let device_stalled = device.heartbeat_age() >= UNRESPONSIVE_AFTER.min(self.tick() * 2);
        let device_down = device_stalled || device.health() == DeviceHealth::Lost;
        let now = Instant::now();
        let mut verdicts = Vec::new();
        for mut entry in self.watched.iter_mut() {
            let slot = *entry.key();
            let w = entry.value_mut();
            if device_down {
                w.since = now;
                w.ended_since = None;
                continue;
            }
            if let Some(reason) = w.check(device, slot, now) {
                verdicts.push((slot, w.actor.clone(), reason));
            }
        }
        for (slot, actor, reason) in verdicts {
            metrics::counter!("ringvisor_watchdog_trips_total").increment(1);
            tracing::warn!(slot, %reason, "GPU actor watchdog");
            self.unwatch(slot, &actor);
            let _ = actor.send_message(SlotMsg::Hung(reason));
        }
    }
}

impl Watched {
    /// The verdict on this incarnation at `now`, if any.
    fn check(&mut self, device: &Device, slot: u32, now: Instant) -> Option<String> {
        let snap = device.snapshot(slot).ok()?;
        let ended =
            snap.generation != self.generation || matches!(snap.state, SlotState::Failed | SlotState::Terminated);
        match (ended, self.ended_since) {
            (false, _) => self.ended_since = None,
            (true, None) => self.ended_since = Some(now),
            (true, Some(t)) if now.duration_since(t) >= self.timeout => {
                return Some(format!(
                    "GPU actor `{}` (slot {slot}) ended ({:?}) and no event told the host",
                    self.child, snap.state
                ));
            }
            (true, Some(_)) => {}
        }
        let pending = snap.inbox.1.wrapping_sub(snap.inbox.0);
        if ended || pending == 0 || snap.heartbeat != self.heartbeat {
            self.heartbeat = snap.heartbeat;
            self.since = now;
            return None;
        }
        let stale = now.duration_since(self.since);
        (stale >= self.timeout).then(|| {
            format!(
                "GPU actor `{}` (slot {slot}) hung: heartbeat stale for {stale:?} with {pending} messages pending",
                self.child
            )
        })
    }
}

/// The detector task of one device: ends when the device's tree state is gone.
async fn run(slots: Weak<DeviceSlots>) {
    loop {
        let tick = match slots.upgrade() {
            Some(s) => s.watchdogs.tick(),
            None => return,
        };
        tokio::time::sleep(tick).await;
        let Some(s) = slots.upgrade() else { return };
        s.watchdogs.check_all(&s.device);
    }
}
