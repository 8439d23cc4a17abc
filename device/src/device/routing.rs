//! Kernel-to-kernel messages between devices. A behaviour's `rv_send` / `rv_forward` to a *routed address*
//! (`rv_address(device, slot)`, [`routed_address`](crate::message::routed_address)) stages the message in its own
//! outbox; the poller of the sender's device reads it there and writes it into the target's inbox through the
//! [`Router`] the devices of a runtime share, as an `RV_KIND_K2K` message whose source is the sender's routed
//! address.
//!
//! Exactly once: every routed message the device published is, once, either written into its target's inbox
//! (from there on it is processed or handed back like any message the host wrote) or reported to the router's
//! hook as [`Unroutable`] with its reason. While the target's inbox is full the message stays in the sender's
//! outbox (the sender's later replies and routed sends wait behind it, and a sender whose outbox is full gets
//! `RV_ERR_K2K_FULL`: backpressure, as between two actors of one device) for up to [`Router::hold_limit`], then
//! it is unroutable ([`UnroutableReason::InboxFull`]). A forwarded call (`rv_forward` of a host call) takes its
//! waiting caller along: the target's reply answers it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use super::{Device, DeviceInner};
use crate::codes::UnroutableReason;
use crate::error::DeviceError;
use crate::layout::{
    RawEnvelope, RV_FLAG_BULK, RV_FLAG_NO_REPLY, RV_KIND_K2K, RV_MAX_ROUTED_DEVICES, RV_PAYLOAD_BYTES, RV_ROUTED_BIT,
};
use crate::message::{routed_address, split_routed_address, Envelope};

/// How long a routed message waits for room in its target's inbox by default.
pub const DEFAULT_HOLD_LIMIT: Duration = Duration::from_secs(1);

/// A routed message that was not delivered, as the router's hook receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unroutable {
    /// The sender's device index.
    pub from_device: u32,
    /// The sender's slot.
    pub from_slot: u32,
    /// The target's device index (from the address).
    pub to_device: u32,
    /// The target's slot (from the address).
    pub to_slot: u32,
    /// The message as the sender published it (its source is the sender's slot, its destination the address).
    pub envelope: Envelope,
    /// Why it was not delivered.
    pub reason: UnroutableReason,
}

/// What the router does with a message it could not deliver.
pub type UnroutableHook = Arc<dyn Fn(Unroutable) + Send + Sync>;

/// The devices of a runtime by index, for the routed kernel-to-kernel messages between them (module docs).
/// Cheap to clone. A device joins with [`Router::attach`]; a replacement attached at the same index takes the
/// old device's place.
#[derive(Clone)]
pub struct Router {
    inner: Arc<RouterInner>,
}

pub(crate) struct RouterInner {
    devices: RwLock<Vec<Weak<DeviceInner>>>,
    hook: RwLock<Option<UnroutableHook>>,
    hold_limit: Duration,
}

impl Default for Router {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("hold_limit", &self.inner.hold_limit).finish_non_exhaustive()
    }
}

impl Router {
    /// A router with no device, no hook, and the [`DEFAULT_HOLD_LIMIT`].
    pub fn new() -> Self {
        Self::with_hold_limit(DEFAULT_HOLD_LIMIT)
    }

    /// A router whose messages wait up to `hold_limit` for room in a full inbox.
    pub fn with_hold_limit(hold_limit: Duration) -> Self {
        Self { inner: Arc::new(RouterInner { devices: RwLock::default(), hook: RwLock::default(), hold_limit }) }
    }

    /// How long a routed message waits for room in its target's full inbox before it is unroutable.
    pub fn hold_limit(&self) -> Duration {
        self.inner.hold_limit
    }

    /// Makes `device` device `index` of this router: routed addresses naming `index` reach it, and its own
    /// routed sends go through this router (their source names `index`). A device attached before at `index`
    /// is replaced. Fails for an index a routed address cannot hold (127 or more).
    pub fn attach(&self, index: u32, device: &Device) -> Result<(), DeviceError> {
        if index >= RV_MAX_ROUTED_DEVICES {
            return Err(DeviceError::InvalidConfig(format!(
                "device index {index} cannot be routed to (at most {} devices)",
                RV_MAX_ROUTED_DEVICES
            )));
        }
        {
            let mut devices = self.inner.devices.write().unwrap_or_else(|e| e.into_inner());
            if devices.len() <= index as usize {
                devices.resize_with(index as usize + 1, Weak::new);
            }
            devices[index as usize] = Arc::downgrade(&device.inner);
        }
        *device.inner.route.write().unwrap_or_else(|e| e.into_inner()) = Some((self.inner.clone(), index));
        Ok(())
    }

    /// Calls `hook` for every routed message that was not delivered (on the sender's poller thread: keep it
    /// short). Replaces an earlier hook.
    pub fn on_unroutable(&self, hook: impl Fn(Unroutable) + Send + Sync + 'static) {
        *self.inner.hook.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(hook));
    }
}

impl RouterInner {
    fn device(&self, index: u32) -> Option<Arc<DeviceInner>> {
        self.devices.read().unwrap_or_else(|e| e.into_inner()).get(index as usize)?.upgrade()
    }

    fn hook(&self) -> Option<UnroutableHook> {
        self.hook.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl DeviceInner {
    /// Polls each other device of this device's router once, in its poller's place, if no one else is polling
    /// it: a caller waiting for a call its actor forwarded to another device reads the answer there itself.
    pub(super) fn poll_routed_peers(&self) {
        let router = match &*self.route.read().unwrap_or_else(|e| e.into_inner()) {
            Some((router, _)) => router.clone(),
            None => return,
        };
        let peers: Vec<Arc<DeviceInner>> = router
            .devices
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|d| !std::ptr::eq(Arc::as_ptr(d), self))
            .collect();
        for peer in peers {
            peer.poll_assist();
        }
    }
}

/// Whether an outbox envelope is a routed kernel-to-kernel send (not a reply).
pub(super) fn is_routed(raw: &RawEnvelope) -> bool {
    raw.kind == RV_KIND_K2K as u8 && raw.destination & RV_ROUTED_BIT != 0
}

/// What became of a routed message read from an outbox.
pub(super) enum RouteStep {
    /// Delivered, or reported unroutable: the outbox cell is free.
    Done,
    /// The target's inbox is full: leave the message in the outbox and try again later.
    Hold,
}

impl DeviceInner {
    /// Routes the message in `slot`'s outbox cell `raw` (see the module docs); `held_since` is when it was first
    /// held, if it was.
    pub(super) fn route_outbox_message(&self, slot: u32, raw: &RawEnvelope, held_since: Option<Instant>) -> RouteStep {
        let (to_device, to_slot) = split_routed_address(raw.destination);
        let link = self.route.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some((router, from_device)) = link else {
            self.unroutable(None, 0, slot, raw, UnroutableReason::NoRouter);
            return RouteStep::Done;
        };
        if raw.payload_len as u32 > RV_PAYLOAD_BYTES || raw.flags & RV_FLAG_BULK as u8 != 0 {
            self.unroutable(Some(&router), from_device, slot, raw, UnroutableReason::Malformed);
            return RouteStep::Done;
        }
        let Some(target) = router.device(to_device) else {
            self.unroutable(Some(&router), from_device, slot, raw, UnroutableReason::NoDevice);
            return RouteStep::Done;
        };
        if to_slot >= target.grid.slot_count() {
            self.unroutable(Some(&router), from_device, slot, raw, UnroutableReason::NoSlot);
            return RouteStep::Done;
        }
        let mut delivered = *raw;
        delivered.flags = raw.flags & RV_FLAG_NO_REPLY as u8;
        // `from_device` and `slot` are valid routed parts: the router checked the index, the grid's slots fit.
        delivered.source = routed_address(from_device, slot).unwrap_or(raw.source);
        delivered.destination = to_slot;
        // A forwarded call: the caller waiting here is answered by the target's reply, which the target's
        // poller matches by a new correlation id.
        let forwarded =
            (delivered.flags & RV_FLAG_NO_REPLY as u8 == 0).then(|| self.calls.lock().find(raw.correlation)).flatten();
        delivered.correlation = super::correlation::next();
        if let Some(w) = &forwarded {
            target.calls.lock().insert(delivered.correlation, w.clone());
        }
        match target.deliver_routed(to_slot, delivered, &self.counters.routed_out) {
            Ok(()) => {
                if forwarded.is_some() {
                    self.calls.lock().remove(raw.correlation);
                }
                RouteStep::Done
            }
            Err(e) => {
                if forwarded.is_some() {
                    target.calls.lock().remove(delivered.correlation);
                }
                let reason = match e {
                    DeviceError::InboxFull { .. } => {
                        let waited = held_since.map_or(Duration::ZERO, |t| t.elapsed());
                        if waited < router.hold_limit && !self.closed.load(Ordering::Acquire) {
                            return RouteStep::Hold;
                        }
                        UnroutableReason::InboxFull
                    }
                    DeviceError::DeviceLost | DeviceError::Closed => UnroutableReason::DeviceGone,
                    _ => UnroutableReason::NotRunning,
                };
                self.unroutable(Some(&router), from_device, slot, raw, reason);
                RouteStep::Done
            }
        }
    }

    /// Reports a routed message that was not delivered: counted, the call it answered (if forwarded) failed,
    /// and the router's hook called (logged when there is none).
    fn unroutable(
        &self,
        router: Option<&RouterInner>,
        from_device: u32,
        slot: u32,
        raw: &RawEnvelope,
        reason: UnroutableReason,
    ) {
        // counted and reported before the caller of a forwarded call hears of it (as a hand-back is)
        self.counters.unroutable.fetch_add(1, Ordering::Relaxed);
        let (to_device, to_slot) = split_routed_address(raw.destination);
        let letter =
            Unroutable { from_device, from_slot: slot, to_device, to_slot, envelope: Envelope::from_raw(raw), reason };
        match router.and_then(RouterInner::hook) {
            Some(hook) => hook(letter),
            None => tracing::warn!(slot, to_device, to_slot, reason = reason.label(), "routed message not delivered"),
        }
        if raw.flags & RV_FLAG_NO_REPLY as u8 == 0 {
            if let Some(w) = self.calls.lock().take(raw.correlation) {
                w.complete(Err(DeviceError::Unroutable { device: to_device, slot: to_slot, reason }));
            }
        }
    }

    /// Writes a routed message into `slot`'s inbox now, or fails without writing (no waiting: the caller is a
    /// poller, which holds the message in its outbox while the inbox is full). Counted here as received and in
    /// `sent` (the sender's `routed_out`) before the receiver can see it.
    fn deliver_routed(&self, slot: u32, raw: RawEnvelope, sent: &AtomicU64) -> Result<(), DeviceError> {
        self.check_open()?;
        // inline (checked by the caller): the payload travels in `raw`
        let payload = raw.payload;
        let count = || {
            self.counters.routed_in.fetch_add(1, Ordering::Relaxed);
            sent.fetch_add(1, Ordering::Relaxed);
        };
        if !self.try_write(slot, raw, &payload[..raw.payload_len as usize], count)? {
            return Err(DeviceError::InboxFull { slot });
        }
        Ok(())
    }
}
