//! Who hears of device events: streams ([`Device::subscribe`]) and hooks ([`Device::on_event`]), each
//! optionally for one slot; and the replies to posted messages ([`Device::replies`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{Device, DeviceInner};
use crate::error::DeviceError;
use crate::event::SlotEvent;
use crate::message::Reply;
use crate::sync::{lock, Stream, StreamInner};

/// A function called with every device event, on the thread that reads it (see [`Device::on_event`]).
pub type EventHook = dyn Fn(&SlotEvent) + Send + Sync;

/// Where a subscriber's events go.
pub(super) enum Sink {
    Stream(Weak<StreamInner<SlotEvent>>),
    Hook(Weak<EventHook>),
}

/// Who hears of events: sinks for every slot, and sinks for one slot each (kept apart, so an event costs the
/// sinks that want it, not one look at every slot's subscriber: a tree of 100,000 stopping children has
/// 100,000 of them). Dropped streams and hooks are pruned when an event passes their list, or a sink is added
/// to it.
#[derive(Default)]
pub(super) struct Subscribers {
    all: Vec<Sink>,
    by_slot: std::collections::HashMap<u32, Vec<Sink>>,
}

impl Sink {
    /// Hands `event` over; false if the sink was dropped.
    fn deliver(&self, event: &SlotEvent) -> bool {
        match self {
            Sink::Stream(weak) => weak.upgrade().map(|s| Stream::push_to(&s, event.clone())).is_some(),
            Sink::Hook(weak) => weak.upgrade().map(|hook| hook(event)).is_some(),
        }
    }

    fn alive(&self) -> bool {
        match self {
            Sink::Stream(weak) => weak.strong_count() > 0,
            Sink::Hook(weak) => weak.strong_count() > 0,
        }
    }
}

impl Subscribers {
    fn add(&mut self, slot: Option<u32>, sink: Sink) {
        let list = match slot {
            None => &mut self.all,
            Some(slot) => self.by_slot.entry(slot).or_default(),
        };
        list.retain(Sink::alive);
        list.push(sink);
    }
}

impl Device {
    /// Replies to [`Device::post`] messages (and late replies to timed-out calls), in arrival order.
    pub fn replies(&self) -> Stream<Reply> {
        self.inner.replies.clone()
    }

    /// Every event of every slot, from now on.
    pub fn subscribe(&self) -> Stream<SlotEvent> {
        self.add_subscriber(None)
    }

    /// Calls `hook` with every event from now on, on the thread that reads it from the device (the poller, a
    /// caller polling in its place, or on the CPU backend the worker thread that published it), in event order, until the last `Arc` of the hook is dropped. No
    /// thread hand-off: the lowest-latency way to follow events. The hook must be quick, must not block,
    /// and must not call back into this device (it runs while events are being dispatched).
    pub fn on_event(&self, hook: &Arc<EventHook>) {
        lock(&self.inner.subscribers).add(None, Sink::Hook(Arc::downgrade(hook)));
    }

    /// Every event of `slot`, from now on.
    pub fn subscribe_slot(&self, slot: u32) -> Result<Stream<SlotEvent>, DeviceError> {
        self.check_slot(slot)?;
        Ok(self.add_subscriber(Some(slot)))
    }

    pub(super) fn add_subscriber(&self, slot: Option<u32>) -> Stream<SlotEvent> {
        let stream = Stream::new();
        if self.inner.closed.load(Ordering::Acquire) {
            stream.close();
        }
        lock(&self.inner.subscribers).add(slot, Sink::Stream(stream.downgrade()));
        stream
    }
}

impl DeviceInner {
    /// Hands an event to every subscriber that wants it (pruning dropped ones).
    pub(super) fn dispatch(&self, slot_event: SlotEvent) {
        let mut subs = lock(&self.subscribers);
        subs.all.retain(|sink| sink.deliver(&slot_event));
        let slot = slot_event.event.slot;
        if let Some(list) = subs.by_slot.get_mut(&slot) {
            list.retain(|sink| sink.deliver(&slot_event));
            if list.is_empty() {
                subs.by_slot.remove(&slot);
            }
        }
    }

    /// Closes the replies stream and every subscriber's stream (the device stopped); hooks are dropped.
    pub(super) fn close_subscribers(&self) {
        self.replies.close();
        let mut subs = lock(&self.subscribers);
        let all = std::mem::take(&mut subs.all);
        let by_slot = std::mem::take(&mut subs.by_slot);
        for sink in all.into_iter().chain(by_slot.into_values().flatten()) {
            if let Sink::Stream(s) = sink {
                if let Some(s) = s.upgrade() {
                    Stream::close_inner(&s);
                }
            }
        }
    }
}
