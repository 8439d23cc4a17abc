//! The host side of the bulk areas (`rv_bulk_ref` in `kernels/rv_layout.h`): where a payload over
//! [`PAYLOAD_BYTES`](crate::PAYLOAD_BYTES) lies. Each slot has three byte rings of `bulk_bytes` (a power of two):
//! host to actor and actor to host in the shared region, actor to actor in the local one. A large message's
//! envelope carries `{end, len}`; its bytes are `[end - len, end)` of a free-running counter, never wrapping
//! around the area's end, 16-byte aligned. The same arithmetic as `rv_bulk_reserve` / `rv_bulk_at` in
//! `kernels/protocol/view.cu`; the device checks every reference the host writes, and the host every one it reads.

use crate::layout::{RawBulkRef, RawEnvelope, RV_FLAG_BULK};
use crate::ring;

/// Reserves `len` bytes (non-zero, at most `size`) in an area of `size` bytes whose producer counter is `tail`
/// and consumer counter `head`: the new producer counter (the reference's `end`), or `None` while there is no
/// room. The bytes in use are `[head, tail)`: the new ones fit if they end within `size` of `head`, or anywhere
/// when nothing is in use.
pub(crate) fn reserve(size: u32, tail: u32, head: u32, len: u32) -> Option<u32> {
    debug_assert!(size.is_power_of_two() && len > 0 && len <= size);
    let mut start = tail.wrapping_add(15) & !15;
    if (start & (size - 1)) + len > size {
        start = start.wrapping_add(size - 1) & !(size - 1);
    }
    let end = start.wrapping_add(len);
    (ring::distance(head, end) <= size || head == tail).then_some(end)
}

/// The bulk reference of a large envelope, if it is one.
pub(crate) fn reference(raw: &RawEnvelope) -> Option<RawBulkRef> {
    if u32::from(raw.flags) & RV_FLAG_BULK == 0 {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes(raw.payload[i..i + 4].try_into().expect("4 bytes"));
    Some(RawBulkRef { end: word(0), len: word(4) })
}

/// Makes `raw` a large envelope whose bytes are `r`.
pub(crate) fn set_reference(raw: &mut RawEnvelope, r: RawBulkRef) {
    raw.flags |= RV_FLAG_BULK as u8;
    raw.payload_len = std::mem::size_of::<RawBulkRef>() as u16;
    raw.payload[..4].copy_from_slice(&r.end.to_le_bytes());
    raw.payload[4..8].copy_from_slice(&r.len.to_le_bytes());
}

/// Where `r`'s bytes start in an area of `size` bytes, or `None` if it names anything outside the area (or the
/// device has no bulk areas).
pub(crate) fn offset(size: u32, r: RawBulkRef) -> Option<u32> {
    if size == 0 || r.len > size {
        return None;
    }
    let start = start(size, r);
    (start + r.len <= size).then_some(start)
}

/// Where `r`'s bytes start in an area of `size` bytes (a power of two); inside the area for every reference
/// [`reserve`] made, unchecked otherwise (see [`offset`]).
pub(crate) fn start(size: u32, r: RawBulkRef) -> u32 {
    ring::back(r.end, r.len) & (size - 1)
}

/// The producer side of the host-to-actor area of one slot: the host writes large messages into it and frees
/// their bytes once their inbox cells are reusable (below the inbox floor), in message order.
#[derive(Debug, Default)]
pub(crate) struct InboxBulk {
    tail: u32,
    head: u32,
    /// `(inbox index, end)` of each large message whose cell is still in use, oldest first.
    in_use: std::collections::VecDeque<(u32, u32)>,
}

impl InboxBulk {
    /// Frees the bytes of every large message whose inbox cell is below `floor` (reusable).
    pub(crate) fn release_below(&mut self, floor: u32) {
        while let Some(&(index, end)) = self.in_use.front() {
            if ring::at_or_after(index, floor) {
                break;
            }
            self.head = end;
            self.in_use.pop_front();
        }
    }

    /// Reserves room for a message of `len` bytes that will sit in inbox cell `index`: the reference to write,
    /// or `None` while the area has no room.
    pub(crate) fn reserve(&mut self, size: u32, index: u32, len: u32) -> Option<RawBulkRef> {
        let end = reserve(size, self.tail, self.head, len)?;
        self.tail = end;
        self.in_use.push_back((index, end));
        Some(RawBulkRef { end, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_aligned_never_wraps_and_waits_for_the_consumer() {
        // 256-byte area: 100 bytes at 0, then 100 at 112 (aligned), then 100 does not fit before the end
        // (224 + 100 > 256) and skips to the next lap, which needs the consumer to have freed up to 100.
        assert_eq!(reserve(256, 0, 0, 100), Some(100));
        assert_eq!(reserve(256, 100, 0, 100), Some(212));
        assert_eq!(reserve(256, 212, 0, 100), None);
        assert_eq!(reserve(256, 212, 99, 100), None);
        assert_eq!(reserve(256, 212, 100, 100), Some(356));
        assert_eq!(offset(256, RawBulkRef { end: 356, len: 100 }), Some(0));
        // a whole-area message fits only in an empty area, wherever the counters stand
        assert_eq!(reserve(256, 256, 0, 256), None);
        assert_eq!(reserve(256, 256, 256, 256), Some(512));
        assert_eq!(reserve(256, 100, 100, 256), Some(512));
        assert_eq!(reserve(256, 100, 99, 256), None);
        // in an empty area the skip to the next lap costs nothing: 200 bytes after an end at 100
        assert_eq!(reserve(256, 100, 100, 200), Some(456));
        // counters wrap around u32 like the device's
        let near = u32::MAX - 63;
        let end = reserve(256, near, near, 100).expect("room");
        assert_eq!(offset(256, RawBulkRef { end, len: 100 }), Some(0));
    }

    #[test]
    fn a_reference_outside_its_area_is_refused() {
        assert_eq!(offset(0, RawBulkRef { end: 10, len: 10 }), None);
        assert_eq!(offset(256, RawBulkRef { end: 10, len: 300 }), None);
        assert_eq!(offset(256, RawBulkRef { end: 300, len: 100 }), None); // starts at 200: 200 + 100 > 256
        assert_eq!(offset(256, RawBulkRef { end: 256, len: 256 }), Some(0));
    }

    #[test]
    fn inbox_bytes_are_freed_in_message_order_once_their_cells_are_reusable() {
        let mut bulk = InboxBulk::default();
        let a = bulk.reserve(256, 5, 120).expect("room");
        let b = bulk.reserve(256, 7, 120).expect("room");
        assert_eq!(bulk.reserve(256, 8, 120), None);
        bulk.release_below(5); // cell 5 still in use
        assert_eq!(bulk.reserve(256, 8, 120), None);
        bulk.release_below(6);
        assert_eq!(bulk.reserve(256, 8, 120), Some(RawBulkRef { end: 376, len: 120 }));
        assert_eq!((a.end, b.end), (120, 248));
        bulk.release_below(100);
        assert!(bulk.in_use.is_empty());
    }
}
