//! The host side of one inbox, in one place: the room a message takes (a cell, and bytes of the slot's bulk area
//! for a large payload), writing it there, and publishing the tail once for what was written. Every writer goes
//! through [`DeviceInner::write_inbox`]: sends and calls ([`DeviceInner::try_write`]), batches
//! (`Device::send_batch`) and routed deliveries from other devices (`routing.rs`).
//!
//! The host is the inbox's single producer: writers to one slot are serialised by the slot's lock. The device
//! consumes from the head; a restart in flight pins the cells from its reclaim floor on (see `accounting.rs`).

use super::accounting::SlotHost;
use super::DeviceInner;
use crate::bulk;
use crate::error::DeviceError;
use crate::layout::{RawBulkRef, RawEnvelope};
use crate::message::PAYLOAD_BYTES;
use crate::ring;
use crate::shared::SharedGrid;

/// The lowest inbox index still in use: a restart's reclaim floor if one is pending, else the device's
/// consumer index, read again when the cached one leaves no room (or when `fresh`). After a restart block 0
/// carried out under a grant, and until the host has read its event (and handed back what it ended), the cells
/// from the restart's grant floor on are still in use.
fn inbox_floor(grid: &SharedGrid, host: &mut SlotHost, slot: u32, capacity: u32, fresh: bool) -> u32 {
    if let Some(floor) = host.pending.as_ref().and_then(|p| p.floor) {
        return floor;
    }
    if fresh || ring::distance(host.cached_head, host.tail) >= capacity {
        let (head, floor_gen, floor) = grid.inbox_head_and_grant_floor(slot);
        let unread_restart = floor_gen != 0 && ring::after(floor_gen, host.generation);
        host.cached_head = if unread_restart && ring::at_or_after(head, floor) { floor } else { head };
    }
    host.cached_head
}

/// Room taken in a slot's inbox for the next message (at the host's tail).
enum InboxRoom {
    /// A free cell: the payload fits the envelope.
    Cell,
    /// A free cell and these bytes of the slot's bulk area, reserved for a large payload.
    CellAndBulk(RawBulkRef),
}

/// Takes room in `slot`'s inbox for a message of `len` payload bytes, or `None` while there is none: a free
/// cell and, for a large message, bytes of the slot's bulk area (freed as the cells of earlier large messages
/// become reusable). The device's head is re-read when the cached one leaves no room.
fn take_inbox_room(grid: &SharedGrid, host: &mut SlotHost, slot: u32, len: usize) -> Option<InboxRoom> {
    let capacity = grid.config().inbox_capacity;
    for fresh in [false, true] {
        let floor = inbox_floor(grid, host, slot, capacity, fresh);
        host.bulk.release_below(floor);
        if ring::distance(floor, host.tail) >= capacity {
            return None; // the head was re-read already: the cells are full
        }
        if len <= PAYLOAD_BYTES {
            return Some(InboxRoom::Cell);
        }
        if let Some(r) = host.bulk.reserve(grid.config().bulk_bytes, host.tail, len as u32) {
            return Some(InboxRoom::CellAndBulk(r));
        }
    }
    None
}

impl DeviceInner {
    /// Writes messages into `slot`'s inbox, in order, while it has room: `envelope` makes each payload's envelope
    /// (called only for a message that fits; a large payload's bytes go to the bulk area and the envelope gets a
    /// reference to them). Publishes the tail once and wakes the slot once for all of them. Returns how many
    /// were written (0: no room), or the slot's refusal if it takes no messages. `count` runs with that number
    /// before the tail is published, so whoever sees a message sees it counted.
    pub(super) fn write_inbox<'a>(
        &self,
        slot: u32,
        payloads: impl IntoIterator<Item = &'a [u8]>,
        mut envelope: impl FnMut(&[u8]) -> RawEnvelope,
        count: impl FnOnce(usize),
    ) -> Result<usize, DeviceError> {
        let mut host = self.slots[slot as usize].lock();
        if !host.accepting {
            return Err(self.refusal(&host, slot));
        }
        let mut written = 0;
        for payload in payloads {
            let Some(room) = take_inbox_room(&self.grid, &mut host, slot, payload.len()) else { break };
            self.put_message(&mut host, slot, envelope(payload), room, payload);
            written += 1;
        }
        if written > 0 {
            host.sent += written as u64;
            count(written);
            self.grid.publish_inbox_tail(slot, host.tail);
            // The next message's cell, asked for now: a single send's cell was a miss to memory (a ring of 4,096
            // cells a slot leaves the cache before it wraps), paid at the run-set mark's locked instruction (a
            // flood of sends to 64 slots: the benchmark's `send` row 0.11-0.13x -> 0.17-0.19x the channel;
            // latency-mode calls unchanged).
            self.grid.prefetch_inbox_cell(slot, host.tail);
            drop(host);
            super::trace::note_published();
            self.executor.mark_work(slot);
        }
        Ok(written)
    }

    /// Writes `raw` into `slot`'s inbox now if the slot takes messages and has room (`payload` is the message's
    /// payload: a large one's bytes go to the bulk area, an inline one is in `raw` already): `Ok(true)` once it
    /// is written and published, `Ok(false)` when there is no room, the slot's refusal otherwise. `count` runs
    /// before the tail is published.
    pub(super) fn try_write(
        &self,
        slot: u32,
        raw: RawEnvelope,
        payload: &[u8],
        count: impl FnOnce(),
    ) -> Result<bool, DeviceError> {
        Ok(self.write_inbox(slot, [payload], |_| raw, |_| count())? == 1)
    }

    /// Writes one message into `slot`'s inbox at the host's tail, in the `room` taken for it (the caller
    /// publishes the tail): `raw` as is for a payload in its envelope, or `payload` into the bulk bytes reserved
    /// and a reference to them into `raw`.
    fn put_message(&self, host: &mut SlotHost, slot: u32, mut raw: RawEnvelope, room: InboxRoom, payload: &[u8]) {
        if let InboxRoom::CellAndBulk(r) = room {
            self.grid.write_inbox_bulk(slot, bulk::start(self.grid.config().bulk_bytes, r), payload);
            bulk::set_reference(&mut raw, r);
        }
        self.grid.write_inbox(slot, host.tail, &raw);
        host.tail = host.tail.wrapping_add(1);
    }
}
