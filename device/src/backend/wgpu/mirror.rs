//! The host side of the shared region on the WebGPU backend: what is uploaded before a submit and what is written
//! back after it, each by its owner's rules.
//!
//! The host keeps the shared region in host memory (the `Device` reads and writes it as on every backend); the GPU
//! has a copy. Before each submit the executor uploads what the host wrote: the header, the control blocks and the
//! command ring (one range), and the inbox cells and inbox bulk bytes published since the last upload. After it,
//! it writes back only what the device owns (events, outbox cells and their bulk bytes, the device lines of the
//! control blocks and of the header), publishing each ring's producer index last with a release store, as the
//! device code does. The device-owned words it uploads are the values it wrote back after the previous submit,
//! so the GPU's copy of them never goes back in time.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::layout::*;
use crate::ring;

/// The host's shared region, as atomic words.
pub(crate) struct HostWords {
    base: *mut u8,
    bytes: usize,
}

// SAFETY: the region is only accessed through atomic words; it outlives the executor that holds this view.
unsafe impl Send for HostWords {}
// SAFETY: as above.
unsafe impl Sync for HostWords {}

impl HostWords {
    /// A view of `bytes` bytes at `base` (4096-aligned, owned by the executor).
    pub(crate) fn new(base: *mut u8, bytes: usize) -> Self {
        Self { base, bytes }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.bytes,
            "word {off} outside the shared region of {} bytes",
            self.bytes
        );
        // SAFETY: in bounds and 4-aligned (checked above; the base is 4096-aligned); every access to the region
        // from this crate is atomic, so viewing the word as an AtomicU32 is sound.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The word at `off` (acquire).
    pub(crate) fn load(&self, off: usize) -> u32 {
        self.word(off).load(Ordering::Acquire)
    }

    fn store(&self, off: usize, v: u32) {
        self.word(off).store(v, Ordering::Release)
    }

    /// Copies `words.len()` words from `off` (relaxed: the caller read the index that publishes them first).
    fn read_into(&self, off: usize, words: &mut [u32]) {
        for (i, w) in words.iter_mut().enumerate() {
            *w = self.word(off + 4 * i).load(Ordering::Relaxed);
        }
    }
}

const CB: usize = size_of::<RawControlBlock>();
const ENV: usize = size_of::<RawEnvelope>();
const EVT: usize = size_of::<RawEvent>();
const CB_DEVICE_LINE0: (usize, usize) =
    (offset_of!(RawControlBlock, state), offset_of!(RawControlBlock, host_pending_op));
const CB_DEVICE_LINE2: (usize, usize) =
    (offset_of!(RawControlBlock, inbox_head), offset_of!(RawControlBlock, inbox_tail));
const HEADER_DEVICE_LINE: usize = offset_of!(RawGridHeader, keeper_heartbeat);

/// A byte range of the shared region to upload.
pub(crate) struct Upload {
    /// Byte offset in the region.
    pub offset: u64,
    /// The words.
    pub words: Vec<u32>,
}

/// What the executor remembers between submits.
pub(crate) struct Mirror {
    header: RawGridHeader,
    /// Per slot: the inbox tail up to which cells were uploaded.
    uploaded_tail: Vec<u32>,
}

/// A large message's bytes in `slot`'s bulk area (`area` bytes each) starting at `areas`, as a 4-aligned byte range
/// of the region, or `None` when the reference is not one the device would accept.
fn bulk_range(areas: u64, area: u32, slot: u32, env: &[u32]) -> Option<(u64, u64)> {
    let w0 = env[0];
    let flags = (w0 >> 8) & 0xFF;
    let len_field = w0 >> 16;
    if area == 0 || flags & RV_FLAG_BULK == 0 || len_field as usize != size_of::<RawBulkRef>() {
        return None;
    }
    let payload = offset_of!(RawEnvelope, payload) / 4;
    let (end, len) = (env[payload], env[payload + 1]);
    let start = ring::back(end, len) & (area - 1);
    if len > area || start + len > area {
        return None;
    }
    let first = (start & !3) as u64;
    let last = (u64::from(start + len) + 3) & !3;
    let base = areas + u64::from(slot) * u64::from(area);
    Some((base + first, base + last.min(u64::from(area))))
}

impl Mirror {
    /// The mirror of a fresh region laid out by `header`; sets the control-block fields whose zero is not "none"
    /// (`rv_init_local_slot` in the C code: no failed message yet).
    pub(crate) fn new(header: RawGridHeader, host: &HostWords) -> Self {
        let mirror = Self { uploaded_tail: vec![0; header.slot_count as usize], header };
        for s in 0..header.slot_count {
            host.store(mirror.cb(s) + offset_of!(RawControlBlock, failed_index), RV_NO_INDEX);
        }
        mirror
    }

    fn cb(&self, slot: u32) -> usize {
        self.header.off_blocks as usize + slot as usize * CB
    }

    /// What the host wrote since the last submit, in the order the device code reads it: every slot's `host_seq`,
    /// then the inbox and command tails, then everything else (faults after tails; the cells and bulk bytes below
    /// the tails read were written before those tails were published).
    pub(crate) fn uploads(&mut self, host: &HostWords) -> Vec<Upload> {
        let h = &self.header;
        let slots = h.slot_count;
        let host_seq: Vec<u32> =
            (0..slots).map(|s| host.load(self.cb(s) + offset_of!(RawControlBlock, host_seq))).collect();
        let tails: Vec<u32> =
            (0..slots).map(|s| host.load(self.cb(s) + offset_of!(RawControlBlock, inbox_tail))).collect();
        let command_tail = host.load(offset_of!(RawGridHeader, command_tail));
        let mut front = vec![0u32; h.off_events as usize / 4];
        host.read_into(0, &mut front);
        for s in 0..slots {
            front[(self.cb(s) + offset_of!(RawControlBlock, host_seq)) / 4] = host_seq[s as usize];
            front[(self.cb(s) + offset_of!(RawControlBlock, inbox_tail)) / 4] = tails[s as usize];
        }
        front[offset_of!(RawGridHeader, command_tail) / 4] = command_tail;
        let mut out = vec![Upload { offset: 0, words: front }];
        for s in 0..slots {
            let from = self.uploaded_tail[s as usize];
            let n = ring::distance(from, tails[s as usize]).min(h.inbox_capacity);
            for i in 0..n {
                let index = from.wrapping_add(i);
                let off = h.off_inboxes as usize
                    + (s as usize * h.inbox_capacity as usize + (index & (h.inbox_capacity - 1)) as usize) * ENV;
                let mut env = vec![0u32; ENV / 4];
                host.read_into(off, &mut env);
                if let Some((a, b)) = bulk_range(h.off_inbox_bulk, h.bulk_bytes, s, &env) {
                    let mut bytes = vec![0u32; ((b - a) / 4) as usize];
                    host.read_into(a as usize, &mut bytes);
                    out.push(Upload { offset: a, words: bytes });
                }
                out.push(Upload { offset: off as u64, words: env });
            }
            self.uploaded_tail[s as usize] = tails[s as usize];
        }
        out
    }

    /// Writes back what the device owns from `gpu` (the region as read back after a submit: the header, control
    /// blocks, events, outboxes and outbox bulk areas are current there). Calls `replied` for each slot whose
    /// outbox moved. Returns true if anything was published (an event or a reply).
    pub(crate) fn write_back(&self, host: &HostWords, gpu: &[u32], replied: &mut dyn FnMut(u32)) -> bool {
        let h = &self.header;
        let word = |off: usize| gpu[off / 4];
        let mut published = false;
        // Events: the new cells, then (last of all) the tail.
        let event_tail_off = offset_of!(RawGridHeader, event_tail);
        let (old_events, new_events) = (host.load(event_tail_off), word(event_tail_off));
        for i in 0..ring::distance(old_events, new_events).min(h.event_capacity) {
            let off = h.off_events as usize + (old_events.wrapping_add(i) & (h.event_capacity - 1)) as usize * EVT;
            for w in 0..EVT / 4 {
                host.store(off + 4 * w, word(off + 4 * w));
            }
        }
        // Slots: outbox cells and their bulk bytes, the device's lines, the outbox tail last.
        for s in 0..h.slot_count {
            let cb = self.cb(s);
            let tail_off = cb + offset_of!(RawControlBlock, outbox_tail);
            let (old_tail, new_tail) = (host.load(tail_off), word(tail_off));
            for i in 0..ring::distance(old_tail, new_tail).min(h.outbox_capacity) {
                let index = old_tail.wrapping_add(i);
                let off = h.off_outboxes as usize
                    + (s as usize * h.outbox_capacity as usize + (index & (h.outbox_capacity - 1)) as usize) * ENV;
                let env = &gpu[off / 4..(off + ENV) / 4];
                if let Some((a, b)) = bulk_range(h.off_outbox_bulk, h.bulk_bytes, s, env) {
                    for o in (a..b).step_by(4) {
                        host.store(o as usize, word(o as usize));
                    }
                }
                for (w, v) in env.iter().enumerate() {
                    host.store(off + 4 * w, *v);
                }
            }
            for line in [CB_DEVICE_LINE0, CB_DEVICE_LINE2] {
                for off in (cb + line.0..cb + line.1).step_by(4) {
                    if off != tail_off && host.load(off) != word(off) {
                        host.store(off, word(off));
                    }
                }
            }
            if new_tail != old_tail {
                host.store(tail_off, new_tail);
                replied(s);
                published = true;
            }
        }
        // Block 0's line and the command ring's consumer index, then the event ring's producer index.
        for off in (HEADER_DEVICE_LINE..HEADER_DEVICE_LINE + 64).step_by(4) {
            host.store(off, word(off));
        }
        let command_head = offset_of!(RawGridHeader, command_head);
        host.store(command_head, word(command_head));
        if new_events != old_events {
            host.store(event_tail_off, new_events);
            published = true;
        }
        published
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk_env(end: u32, len: u32) -> Vec<u32> {
        let mut env = vec![0u32; ENV / 4];
        env[0] = RV_KIND_USER | (RV_FLAG_BULK << 8) | ((size_of::<RawBulkRef>() as u32) << 16);
        let p = offset_of!(RawEnvelope, payload) / 4;
        env[p] = end;
        env[p + 1] = len;
        env
    }

    #[test]
    fn a_bulk_reference_is_copied_only_within_its_slots_area() {
        // slot 2 of 256-byte areas starting at 1024: bytes [16, 116) of the area
        assert_eq!(bulk_range(1024, 256, 2, &bulk_env(116, 100)), Some((1024 + 512 + 16, 1024 + 512 + 116)));
        // forged references: longer than the area, past its end, wrong length field
        assert_eq!(bulk_range(1024, 256, 2, &bulk_env(600, 300)), None);
        assert_eq!(bulk_range(1024, 256, 2, &bulk_env(300, 100)), None);
        let mut env = bulk_env(116, 100);
        env[0] = RV_KIND_USER | (RV_FLAG_BULK << 8) | (12 << 16);
        assert_eq!(bulk_range(1024, 256, 2, &env), None);
        // no bulk areas at all
        assert_eq!(bulk_range(1024, 0, 2, &bulk_env(116, 100)), None);
    }
}
