//! Thin, checked access to the SHARED region (the host side of `kernels/rv_layout.h`).
//!
//! Every field the device also touches is read or written with a single-field atomic (acquire/release where
//! it publishes or consumes data); envelopes and records are copied whole only while the protocol gives this
//! side exclusive use of the cell (a producer before it publishes the index, a consumer before it releases
//! it). No read-modify-write atomic is ever used on this region.

use crate::layout::*;
use crate::ring;
use std::mem::{align_of, size_of};
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The host's handle on the shared region. It does not own the memory: the backend that allocated it keeps it
/// alive for as long as the device exists.
pub(crate) struct SharedGrid {
    base: *mut u8,
    config: RawGridHeader,
}

// SAFETY: the region is designed for concurrent use by the host and the device: every shared field is accessed
// through atomics, and each ring cell is written by exactly one side at a time (single producer, single
// consumer, ordered by release/acquire on the ring indices). The pointer stays valid while the backend lives.
unsafe impl Send for SharedGrid {}
// SAFETY: as above; `&SharedGrid` only hands out atomic accesses and copies of cells the caller owns.
unsafe impl Sync for SharedGrid {}

/// Loads a u32 field of the shared region.
///
/// # Safety
/// `ptr` must point to a live, 4-byte aligned field of the shared region.
pub(crate) unsafe fn load_u32(ptr: *mut u32, order: Ordering) -> u32 {
    if crate::interleave::active() {
        // SAFETY: as below; the simulator reads the field as this thread may see it.
        return unsafe { crate::interleave::load(ptr as *const u8, 4) } as u32;
    }
    // SAFETY: the caller guarantees a valid, aligned pointer into memory that outlives this call.
    unsafe { AtomicU32::from_ptr(ptr) }.load(order)
}

/// Stores a u32 field of the shared region.
///
/// # Safety
/// `ptr` must point to a live, 4-byte aligned field of the shared region that this side owns.
pub(crate) unsafe fn store_u32(ptr: *mut u32, value: u32, order: Ordering) {
    if crate::interleave::active() {
        // SAFETY: as for `load_u32`.
        return unsafe { crate::interleave::store(ptr as *mut u8, 4, u64::from(value), order != Ordering::Relaxed) };
    }
    // SAFETY: as for `load_u32`.
    unsafe { AtomicU32::from_ptr(ptr) }.store(value, order)
}

/// Loads a u64 field of the shared region.
///
/// # Safety
/// `ptr` must point to a live, 8-byte aligned field of the shared region.
pub(crate) unsafe fn load_u64(ptr: *mut u64, order: Ordering) -> u64 {
    if crate::interleave::active() {
        // SAFETY: as for `load_u32`.
        return unsafe { crate::interleave::load(ptr as *const u8, 8) };
    }
    // SAFETY: as for `load_u32`.
    unsafe { AtomicU64::from_ptr(ptr) }.load(order)
}

/// 16-byte chunks of a record of type `T` (a compile-time error for a record that is not whole chunks).
const fn chunks_of<T>() -> usize {
    assert!(
        size_of::<T>().is_multiple_of(16) && align_of::<T>() >= 16,
        "a shared record is 16-byte chunks, 16-byte aligned"
    );
    size_of::<T>() / 16
}

/// Asks for the cache lines of the cell at `cell` (a hint: no load the program sees, no ordering; nothing off
/// x86-64).
fn prefetch_cell(cell: *const RawEnvelope) {
    let cell = cell as *const i8;
    #[cfg(target_arch = "x86_64")]
    for line in (0..std::mem::size_of::<RawEnvelope>()).step_by(64) {
        // SAFETY: `line` is inside the cell, which callers take from `SharedGrid::cell` (in bounds of its array);
        // a prefetch reads nothing the program sees and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(cell.add(line)) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cell;
}

/// Copies a record into the shared region (a cell the caller owns until it publishes it), 16 bytes at a time: a
/// volatile copy of the whole struct compiled to one load and store per byte (an envelope's 128 bytes took about
/// 400 instructions on a call's path).
///
/// # Safety
/// `dst` must be a live, 16-byte aligned cell of the shared region that this side owns now.
unsafe fn write_record<T: Copy>(dst: *mut T, value: T) {
    if crate::interleave::active() {
        // SAFETY: the caller's guarantee; `value` is a T on this stack.
        return unsafe {
            crate::interleave::write_bytes(dst as *mut u8, &value as *const T as *const u8, size_of::<T>())
        };
    }
    let (dst, src) = (dst as *mut u128, &value as *const T as *const u128);
    for i in 0..const { chunks_of::<T>() } {
        // SAFETY: chunk i of two 16-byte aligned records of size_of::<T>() bytes (the caller's guarantee for `dst`).
        unsafe { std::ptr::write_volatile(dst.add(i), src.add(i).read()) }
    }
}

/// Copies a record out of the shared region (one the other side published, or that this side wrote), 16 bytes at
/// a time (see [`write_record`]).
///
/// # Safety
/// `src` must be a live, 16-byte aligned cell of the shared region that the other side does not write now.
unsafe fn read_record<T: Copy>(src: *const T) -> T {
    let mut out = std::mem::MaybeUninit::<T>::uninit();
    if crate::interleave::active() {
        // SAFETY: the caller's guarantee; the simulator fills all size_of::<T>() bytes of `out` (T is plain data).
        unsafe {
            crate::interleave::read_bytes(out.as_mut_ptr() as *mut u8, src as *const u8, size_of::<T>());
            return out.assume_init();
        }
    }
    let (dst, src) = (out.as_mut_ptr() as *mut u128, src as *const u128);
    for i in 0..const { chunks_of::<T>() } {
        // SAFETY: chunk i of two 16-byte aligned records of size_of::<T>() bytes (the caller's guarantee for `src`).
        unsafe { dst.add(i).write(std::ptr::read_volatile(src.add(i))) }
    }
    // SAFETY: every byte was written above; T is plain data.
    unsafe { out.assume_init() }
}

impl SharedGrid {
    /// Wraps a shared region whose header has been written by `rv_compute_layout`.
    ///
    /// # Safety
    /// `base` must point to `config.shared_bytes` bytes, 64-byte aligned, that stay valid for the lifetime of
    /// the returned value.
    pub(crate) unsafe fn new(base: *mut u8) -> Self {
        // SAFETY: the caller guarantees `base` points at a header written before the device started; the
        // configuration lines are never written again.
        let config = unsafe { std::ptr::read(base as *const RawGridHeader) };
        Self { base, config }
    }

    /// The configuration lines of the header.
    pub(crate) fn config(&self) -> &RawGridHeader {
        &self.config
    }

    pub(crate) fn slot_count(&self) -> u32 {
        self.config.slot_count
    }

    pub(crate) fn header(&self) -> *mut RawGridHeader {
        self.base as *mut RawGridHeader
    }

    /// The control block of `slot`. Panics (a bug in this crate) if `slot` is out of range: public entry points
    /// check slots and return errors before they get here.
    pub(crate) fn block(&self, slot: u32) -> *mut RawControlBlock {
        assert!(slot < self.config.slot_count, "slot index checked by the caller");
        // SAFETY: in bounds of the control block array, which lies inside the region.
        unsafe { (self.base.add(self.config.off_blocks as usize) as *mut RawControlBlock).add(slot as usize) }
    }

    fn cell(&self, offset: u64, slot: u32, capacity: u32, index: u32) -> *mut RawEnvelope {
        assert!(slot < self.config.slot_count, "slot index checked by the caller");
        let i = slot as usize * capacity as usize + (index & (capacity - 1)) as usize;
        // SAFETY: `i` is below slot_count * capacity, the length of the array at `offset`.
        unsafe { (self.base.add(offset as usize) as *mut RawEnvelope).add(i) }
    }

    pub(crate) fn inbox_cell(&self, slot: u32, index: u32) -> *mut RawEnvelope {
        self.cell(self.config.off_inboxes, slot, self.config.inbox_capacity, index)
    }

    pub(crate) fn outbox_cell(&self, slot: u32, index: u32) -> *mut RawEnvelope {
        self.cell(self.config.off_outboxes, slot, self.config.outbox_capacity, index)
    }

    /// Asks for the cache lines of `slot`'s outbox cell `index` (a hint: no load, no ordering; nothing off x86-64).
    pub(crate) fn prefetch_outbox_cell(&self, slot: u32, index: u32) {
        prefetch_cell(self.outbox_cell(slot, index));
    }

    /// Asks for the cache lines of `slot`'s inbox cell `index` before the host writes it (a hint, as above). A cell
    /// last touched a ring's length ago has usually left every cache: fetched now, it arrives exclusive, and the
    /// write that follows does not wait for memory at the next locked instruction.
    pub(crate) fn prefetch_inbox_cell(&self, slot: u32, index: u32) {
        prefetch_cell(self.inbox_cell(slot, index));
    }

    /// Writes an envelope into an inbox cell the host owns (between the device's head and the host's tail).
    pub(crate) fn write_inbox(&self, slot: u32, index: u32, env: &RawEnvelope) {
        // SAFETY: the cell is in bounds; the caller (holding the slot's send lock) owns it: it is not yet
        // published, and the device never writes inbox cells.
        unsafe { write_record(self.inbox_cell(slot, index), *env) }
    }

    /// Reads back an inbox cell (a message the device did not consume).
    pub(crate) fn read_inbox(&self, slot: u32, index: u32) -> RawEnvelope {
        // SAFETY: the cell is in bounds; the device only reads inbox cells, and the host does not overwrite
        // cells it has not yet reported (see the reclaim floor in device/accounting.rs).
        unsafe { read_record(self.inbox_cell(slot, index)) }
    }

    /// Reads an outbox cell the device published (index below the acquired outbox tail).
    pub(crate) fn read_outbox(&self, slot: u32, index: u32) -> RawEnvelope {
        // SAFETY: in bounds; published by the device with a release store the caller acquired, and not
        // reused by the device until the host moves outbox_head past it.
        unsafe { read_record(self.outbox_cell(slot, index)) }
    }

    /// `len` bytes at `offset` of `slot`'s area in the bulk array at `area` (`off_inbox_bulk` or
    /// `off_outbox_bulk`). Panics (a bug in this crate) if they are not inside that one area: callers check
    /// references with `bulk::offset` first.
    fn bulk_bytes_at(&self, area: u64, slot: u32, offset: u32, len: u32) -> *mut u8 {
        let size = self.config.bulk_bytes;
        assert!(slot < self.config.slot_count, "slot index checked by the caller");
        assert!(u64::from(offset) + u64::from(len) <= u64::from(size), "bulk reference checked by the caller");
        // SAFETY: the area array holds slot_count areas of `size` bytes at `area`; the range is inside one.
        unsafe { self.base.add(area as usize + slot as usize * size as usize + offset as usize) }
    }

    /// Writes the bytes of a large message into `slot`'s inbox bulk area, at bytes the host owns (reserved by
    /// the slot's single producer and not yet published).
    pub(crate) fn write_inbox_bulk(&self, slot: u32, offset: u32, bytes: &[u8]) {
        let dst = self.bulk_bytes_at(self.config.off_inbox_bulk, slot, offset, bytes.len() as u32);
        // SAFETY: in bounds (checked above); the device only reads inbox bulk bytes, and not these before the
        // envelope naming them is published with a release store of the inbox tail.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) }
    }

    /// Reads the bytes of a large message from `slot`'s inbox bulk area (one the device did not consume).
    pub(crate) fn read_inbox_bulk(&self, slot: u32, offset: u32, len: u32) -> Vec<u8> {
        self.read_bulk(self.config.off_inbox_bulk, slot, offset, len)
    }

    /// Reads the bytes of a large reply from `slot`'s outbox bulk area (published with the reply's cell, not
    /// reused by the device before the host moves `outbox_bulk_head` past them).
    pub(crate) fn read_outbox_bulk(&self, slot: u32, offset: u32, len: u32) -> Vec<u8> {
        self.read_bulk(self.config.off_outbox_bulk, slot, offset, len)
    }

    fn read_bulk(&self, area: u64, slot: u32, offset: u32, len: u32) -> Vec<u8> {
        let src = self.bulk_bytes_at(area, slot, offset, len);
        let mut out = vec![0u8; len as usize];
        // SAFETY: in bounds (checked above); no one writes these bytes while the host may read them (see the
        // two callers).
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), len as usize) }
        out
    }

    /// Frees `slot`'s outbox bulk area up to `end` (the host is its single consumer).
    pub(crate) fn release_outbox_bulk(&self, slot: u32, end: u32) {
        // SAFETY: aligned, host-owned field of a live control block.
        unsafe { store_u32(addr_of_mut!((*self.block(slot)).outbox_bulk_head), end, Ordering::Release) }
    }

    /// Writes a command record the host owns (not yet published).
    pub(crate) fn write_command(&self, index: u32, cmd: &RawCommand) {
        let i = (index & (self.config.command_capacity - 1)) as usize;
        // SAFETY: in bounds of the command ring; the single producer (behind the command lock) owns the cell
        // until it publishes command_tail.
        unsafe {
            let ring = self.base.add(self.config.off_commands as usize) as *mut RawCommand;
            write_record(ring.add(i), *cmd)
        }
    }

    /// Reads an event record the device published.
    pub(crate) fn read_event(&self, index: u32) -> RawEvent {
        let i = (index & (self.config.event_capacity - 1)) as usize;
        // SAFETY: in bounds; published by block 0 and not reused until the host moves event_head past it.
        unsafe {
            let ring = self.base.add(self.config.off_events as usize) as *const RawEvent;
            read_record(ring.add(i))
        }
    }

    /// Messages published to `slot`'s inbox and not yet consumed (tail − head, two loads).
    pub(crate) fn inbox_pending(&self, slot: u32) -> u32 {
        // SAFETY: aligned fields of a live control block.
        unsafe {
            let tail = load_u32(addr_of_mut!((*self.block(slot)).inbox_tail), Ordering::Relaxed);
            let head = load_u32(addr_of_mut!((*self.block(slot)).inbox_head), Ordering::Acquire);
            ring::distance(head, tail)
        }
    }

    /// The device's state and generation of `slot` (one line of its control block).
    pub(crate) fn lifecycle(&self, slot: u32) -> (u32, u32) {
        // SAFETY: aligned fields of a live control block.
        unsafe {
            let state = load_u32(addr_of_mut!((*self.block(slot)).state), Ordering::Acquire);
            (state, load_u32(addr_of_mut!((*self.block(slot)).generation), Ordering::Relaxed))
        }
    }

    /// The generation, heartbeat and messages processed of `slot` (line 0 of its control block).
    pub(crate) fn activity(&self, slot: u32) -> (u32, u64, u64) {
        let b = self.block(slot);
        // SAFETY: aligned fields of a live control block.
        unsafe {
            (
                load_u32(addr_of_mut!((*b).generation), Ordering::Relaxed),
                load_u64(addr_of_mut!((*b).heartbeat), Ordering::Relaxed),
                load_u64(addr_of_mut!((*b).messages_processed), Ordering::Relaxed),
            )
        }
    }

    /// The device's inbox head of `slot` (first message not yet consumed).
    pub(crate) fn inbox_head(&self, slot: u32) -> u32 {
        // SAFETY: aligned field of a live control block.
        unsafe { load_u32(addr_of_mut!((*self.block(slot)).inbox_head), Ordering::Acquire) }
    }

    /// Publishes the host's inbox tail of `slot` (the caller holds the slot's send lock), and tells the actor.
    pub(crate) fn publish_inbox_tail(&self, slot: u32, tail: u32) {
        // SAFETY: aligned, host-owned field of a live control block.
        unsafe { store_u32(addr_of_mut!((*self.block(slot)).inbox_tail), tail, Ordering::Release) }
        self.bump_host_seq(slot);
    }

    /// Bumps `host_seq` of `slot` after a write its actor must notice: an idle actor reads only that word, and
    /// its next step is a full one. Its writers (senders, fault injectors) hold the slot's lock, so it is a load
    /// and a releasing store, not a read-modify-write (a locked instruction on every message's path); the device
    /// only loads the word.
    fn bump_host_seq(&self, slot: u32) {
        // SAFETY: aligned, host-owned field of a live control block, written by one host thread at a time (the
        // caller's lock).
        unsafe {
            let seq = addr_of_mut!((*self.block(slot)).host_seq);
            store_u32(seq, load_u32(seq, Ordering::Relaxed).wrapping_add(1), Ordering::Release)
        }
    }

    /// The device's outbox tail of `slot` (one past the last published reply).
    pub(crate) fn outbox_tail(&self, slot: u32) -> u32 {
        // SAFETY: aligned field of a live control block.
        unsafe { load_u32(addr_of_mut!((*self.block(slot)).outbox_tail), Ordering::Acquire) }
    }

    /// Releases outbox cells up to `head` back to the device (the caller is the single outbox consumer).
    pub(crate) fn release_outbox(&self, slot: u32, head: u32) {
        // SAFETY: aligned, host-owned field of a live control block.
        unsafe { store_u32(addr_of_mut!((*self.block(slot)).outbox_head), head, Ordering::Release) }
    }

    /// Writes the host-owned fault-injection fields of `slot` (flags first, then the sequence number), and tells
    /// the actor; the caller holds the slot's send lock.
    pub(crate) fn write_faults(&self, slot: u32, flags: u32, seq: u32) {
        let b = self.block(slot);
        // SAFETY: aligned, host-owned fields of a live control block.
        unsafe {
            store_u32(addr_of_mut!((*b).fault_flags), flags, Ordering::Release);
            store_u32(addr_of_mut!((*b).fault_seq), seq, Ordering::Release);
        }
        self.bump_host_seq(slot);
    }

    /// Grants block 0 a restart in place of `slot`'s incarnation of `generation` if it fails (0: none).
    pub(crate) fn write_restart_grant(&self, slot: u32, generation: u32) {
        // SAFETY: aligned, host-owned field of a live control block.
        unsafe { store_u32(addr_of_mut!((*self.block(slot)).restart_grant), generation, Ordering::Release) }
    }

    /// The inbox head of `slot` with, if block 0 restarted it under a grant, where the cells the host has still
    /// to read back start and the generation whose event it must see first: `(head, grant_floor_gen,
    /// grant_floor)`, read in the order block 0 writes them in reverse (see `rv_keeper_granted_restart`).
    pub(crate) fn inbox_head_and_grant_floor(&self, slot: u32) -> (u32, u32, u32) {
        let b = self.block(slot);
        // SAFETY: aligned fields of a live control block.
        unsafe {
            let head = load_u32(addr_of_mut!((*b).inbox_head), Ordering::Acquire);
            let floor_gen = load_u32(addr_of_mut!((*b).grant_floor_gen), Ordering::Acquire);
            let floor = load_u32(addr_of_mut!((*b).grant_floor), Ordering::Relaxed);
            (head, floor_gen, floor)
        }
    }

    /// Records the op of the command the host has in flight for `slot` (diagnostics only).
    pub(crate) fn write_pending_op(&self, slot: u32, op: u32) {
        // SAFETY: aligned, host-owned field of a live control block.
        unsafe { store_u32(addr_of_mut!((*self.block(slot)).host_pending_op), op, Ordering::Relaxed) }
    }

    /// Block 0's command-ring head (commands consumed).
    pub(crate) fn command_head(&self) -> u32 {
        // SAFETY: aligned field of the live header.
        unsafe { load_u32(addr_of_mut!((*self.header()).command_head), Ordering::Acquire) }
    }

    /// Publishes the host's command-ring tail (the caller is the single command producer).
    pub(crate) fn publish_command_tail(&self, tail: u32) {
        // SAFETY: aligned, host-owned field of the live header.
        unsafe { store_u32(addr_of_mut!((*self.header()).command_tail), tail, Ordering::Release) }
    }

    /// Block 0's event-ring tail (one past the last published event).
    pub(crate) fn event_tail(&self) -> u32 {
        // SAFETY: aligned field of the live header.
        unsafe { load_u32(addr_of_mut!((*self.header()).event_tail), Ordering::Acquire) }
    }

    /// Whether block 0 published events the host has not read yet (its tail past the head the host released).
    pub(crate) fn events_unread(&self) -> bool {
        // SAFETY: aligned fields of the live header (the head is the host's own, read back).
        let head = unsafe { load_u32(addr_of_mut!((*self.header()).event_head), Ordering::Relaxed) };
        self.event_tail() != head
    }

    /// Releases event records up to `head` back to block 0 (the caller is the single event consumer).
    pub(crate) fn release_events(&self, head: u32) {
        // SAFETY: aligned, host-owned field of the live header.
        unsafe { store_u32(addr_of_mut!((*self.header()).event_head), head, Ordering::Release) }
    }

    /// Sets the device-wide fault bits (`RV_DEVICE_*`), which every step function reads.
    pub(crate) fn write_device_faults(&self, bits: u32) {
        // SAFETY: aligned, host-owned field of the live header.
        unsafe { store_u32(addr_of_mut!((*self.header()).device_faults), bits, Ordering::Release) }
    }

    /// Tells the actor steps whether a traced call is in flight (`trace_armed`: where a clock read is dear, a step
    /// stamps its start only then). Stored before the traced message is published, so its step sees it.
    pub(crate) fn arm_trace(&self, armed: bool) {
        // SAFETY: aligned, host-owned field of the live header.
        unsafe { store_u32(addr_of_mut!((*self.header()).trace_armed), u32::from(armed), Ordering::Release) }
    }

    /// Asks the persistent kernel to leave its loop for good (a pause becomes a terminate).
    pub(crate) fn request_terminate(&self) {
        // SAFETY: aligned, host-owned field of the live header.
        unsafe { store_u32(addr_of_mut!((*self.header()).terminate), RV_TERMINATE_LEAVE, Ordering::Release) }
    }

    /// The header's `terminate` word, shared by the host's threads (only the host writes it; every kernel block
    /// reads it): compare-and-swap on the host side only.
    fn terminate_word(&self) -> &AtomicU32 {
        // SAFETY: an aligned, host-owned field of the live header; every host access to it is atomic.
        unsafe { AtomicU32::from_ptr(addr_of_mut!((*self.header()).terminate)) }
    }

    /// Asks a running kernel to leave its loop to be relaunched later (see the CUDA backend's quiesce). False if
    /// it is already asked to leave for good.
    pub(crate) fn request_pause(&self) -> bool {
        let word = self.terminate_word();
        matches!(
            word.compare_exchange(0, RV_TERMINATE_PAUSE, Ordering::AcqRel, Ordering::Acquire),
            Ok(_) | Err(RV_TERMINATE_PAUSE)
        )
    }

    /// Withdraws a pause before a relaunch. False if a terminate replaced it (no relaunch then).
    pub(crate) fn clear_pause(&self) -> bool {
        let word = self.terminate_word();
        matches!(word.compare_exchange(RV_TERMINATE_PAUSE, 0, Ordering::AcqRel, Ordering::Acquire), Ok(_) | Err(0))
    }

    /// True while a pause is asked for.
    pub(crate) fn pause_requested(&self) -> bool {
        self.terminate_word().load(Ordering::Acquire) == RV_TERMINATE_PAUSE
    }

    /// True once the kernel is asked to leave for good: terminate requested, or the device halted.
    pub(crate) fn terminate_requested(&self) -> bool {
        let h = self.header();
        self.terminate_word().load(Ordering::Acquire) == RV_TERMINATE_LEAVE
            // SAFETY: aligned field of the live header.
            || unsafe { load_u32(addr_of_mut!((*h).device_faults), Ordering::Acquire) } & RV_DEVICE_HALT != 0
    }

    /// Blocks of the kernel that have entered it (block 0 publishes the count: the launch handshake).
    pub(crate) fn blocks_started(&self) -> u32 {
        // SAFETY: aligned field of the live header.
        unsafe { load_u32(addr_of_mut!((*self.header()).blocks_started), Ordering::Acquire) }
    }

    /// Block `block`'s doorbell: how many of its sweeps published replies. Panics (a bug in this crate) past the
    /// most blocks a grid can have (`slot_count + 1`).
    pub(crate) fn doorbell(&self, block: u32) -> u32 {
        assert!(block <= self.config.slot_count, "block {block} out of range");
        // SAFETY: the layout reserves slot_count + 1 aligned u32 doorbells at off_doorbells; the kernel writes
        // them with release stores.
        unsafe {
            let bells = self.base.add(self.config.off_doorbells as usize) as *mut u32;
            load_u32(bells.add(block as usize), Ordering::Acquire)
        }
    }

    /// A consistent-enough copy of a control block, field by field (each read is atomic, the whole is not).
    pub(crate) fn snapshot(&self, slot: u32) -> RawControlBlock {
        let b = self.block(slot);
        // SAFETY: every pointer below is an aligned field of a live control block.
        unsafe {
            let mut s: RawControlBlock = std::mem::zeroed();
            s.state = load_u32(addr_of_mut!((*b).state), Ordering::Acquire);
            s.generation = load_u32(addr_of_mut!((*b).generation), Ordering::Relaxed);
            s.heartbeat = load_u64(addr_of_mut!((*b).heartbeat), Ordering::Relaxed);
            s.messages_processed = load_u64(addr_of_mut!((*b).messages_processed), Ordering::Relaxed);
            s.last_error = load_u32(addr_of_mut!((*b).last_error) as *mut u32, Ordering::Relaxed) as i32;
            s.behaviour = load_u32(addr_of_mut!((*b).behaviour), Ordering::Relaxed);
            s.hlc = load_u64(addr_of_mut!((*b).hlc), Ordering::Relaxed);
            s.failed_index = load_u32(addr_of_mut!((*b).failed_index), Ordering::Relaxed);
            s.k2k_sent = load_u32(addr_of_mut!((*b).k2k_sent), Ordering::Relaxed);
            s.k2k_received = load_u32(addr_of_mut!((*b).k2k_received), Ordering::Relaxed);
            s.k2k_dropped = load_u32(addr_of_mut!((*b).k2k_dropped), Ordering::Relaxed);
            s.bad_envelopes = load_u32(addr_of_mut!((*b).bad_envelopes), Ordering::Relaxed);
            s.fault_flags = load_u32(addr_of_mut!((*b).fault_flags), Ordering::Relaxed);
            s.fault_seq = load_u32(addr_of_mut!((*b).fault_seq), Ordering::Relaxed);
            s.inbox_head = load_u32(addr_of_mut!((*b).inbox_head), Ordering::Acquire);
            s.outbox_tail = load_u32(addr_of_mut!((*b).outbox_tail), Ordering::Acquire);
            s.stall_until_ns = load_u64(addr_of_mut!((*b).stall_until_ns), Ordering::Relaxed);
            s.inbox_tail = load_u32(addr_of_mut!((*b).inbox_tail), Ordering::Relaxed);
            s.outbox_head = load_u32(addr_of_mut!((*b).outbox_head), Ordering::Relaxed);
            s
        }
    }

    /// The last traced message's record (`RV_FLAG_TRACE`): the slot that answered it and its four device
    /// stamps (host time, ns); the last stamp is read first (the device stores it last, with release).
    pub(crate) fn trace_record(&self) -> (u32, [u64; 4]) {
        let h = self.header();
        // SAFETY: aligned fields of the live header.
        unsafe {
            let published = load_u64(addr_of_mut!((*h).trace_ns[3]), Ordering::Acquire);
            let slot = load_u32(addr_of_mut!((*h).trace_slot), Ordering::Relaxed);
            let stamp = |i: usize| load_u64(addr_of_mut!((*h).trace_ns[i]), Ordering::Relaxed);
            (slot, [stamp(0), stamp(1), stamp(2), published])
        }
    }

    /// Block 0's heartbeat, commands processed and events published.
    pub(crate) fn block0_counters(&self) -> (u64, u64, u64) {
        let h = self.header();
        // SAFETY: aligned fields of the live header.
        unsafe {
            (
                load_u64(addr_of_mut!((*h).keeper_heartbeat), Ordering::Relaxed),
                load_u64(addr_of_mut!((*h).commands_processed), Ordering::Relaxed),
                load_u64(addr_of_mut!((*h).events_published), Ordering::Relaxed),
            )
        }
    }
}
