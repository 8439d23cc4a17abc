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

/// A subscriber: an optional slot filter and its sink (dropped streams and hooks are pruned).
pub(super) type Subscriber = (Option<u32>, Sink);

impl Device {
    /// Replies to [`Device::post`] messages (and late replies to timed-out calls), in arrival order.
    pub fn replies(&self) -> Stream<Reply> {
        self.inner.replies.clone()
    }

    /// Every event of every slot, from now on.
    pub fn subscribe(&self) -> Stream<SlotEvent> {
        self.add_subscriber(None)
    }

    /// Calls `hook` with every event from now on, on the thread that reads it from the device (the poller,
    /// or a caller polling in its place), in event order, until the last `Arc` of the hook is dropped. No
    /// thread hand-off: the lowest-latency way to follow events. The hook must be quick, must not block,
    /// and must not call back into this device (it runs while events are being dispatched).
    pub fn on_event(&self, hook: &Arc<EventHook>) {
        lock(&self.inner.subscribers).push((None, Sink::Hook(Arc::downgrade(hook))));
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
        lock(&self.inner.subscribers).push((slot, Sink::Stream(stream.downgrade())));
        stream
    }
}

impl DeviceInner {
    /// Hands an event to every subscriber that wants it (pruning dropped ones).
    pub(super) fn dispatch(&self, slot_event: SlotEvent) {
        let mut subs = lock(&self.subscribers);
        let wanted = |filter: &Option<u32>| filter.is_none_or(|f| f == slot_event.event.slot);
        subs.retain(|(filter, sink)| match sink {
            Sink::Stream(weak) => match weak.upgrade() {
                Some(s) => {
                    if wanted(filter) {
                        Stream::push_to(&s, slot_event.clone());
                    }
                    true
                }
                None => false,
            },
            Sink::Hook(weak) => match weak.upgrade() {
                Some(hook) => {
                    if wanted(filter) {
                        hook(&slot_event);
                    }
                    true
                }
                None => false,
            },
        });
    }

    /// Closes the replies stream and every subscriber's stream (the device stopped); hooks are dropped.
    pub(super) fn close_subscribers(&self) {
        self.replies.close();
        for (_, sink) in lock(&self.subscribers).drain(..) {
            if let Sink::Stream(s) = sink {
                if let Some(s) = s.upgrade() {
                    Stream::close_inner(&s);
                }
            }
        }
    }
}
