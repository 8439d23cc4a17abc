/*
 * protocol/view.cu - the grid view (pointers into the two regions), the behaviour context, dispatch, addressing, bulk
 * areas and the layout computed from the requested sizes.
 *
 * Part of the device protocol (rv_protocol.cu includes the parts in order; read its header for the ownership
 * rules). Mirrored function by function by wgsl/protocol/view.wgsl (device/tests/protocol_mirror.rs).
 */
#ifndef RV_PROTOCOL_VIEW_CU
#define RV_PROTOCOL_VIEW_CU
#include "../rv_behaviour.h"

#if RV_CUDA
#define RV_STEP_API __device__
#else
#define RV_STEP_API extern "C"
#endif

/* Pointers into the two regions, computed once from the header. Not shared memory itself. */
typedef struct rv_grid_view {
    rv_grid_header *header;
    rv_control_block *blocks;
    rv_command *commands;
    rv_event *events;
    rv_envelope *inboxes;
    rv_envelope *outboxes;
    rv_keeper_record *keepers;
    uint32_t *attention;
    rv_k2k_meta *k2k_meta;
    rv_k2k_cell *k2k_cells;
    uint8_t *state;
    rv_local_header *local_header;
    rv_actor_record *actors;
    uint32_t *doorbells;
    uint8_t *inbox_bulk;  /* shared: host -> actor bulk areas, bulk_bytes per slot */
    uint8_t *outbox_bulk; /* shared: actor -> host */
    uint8_t *k2k_bulk;    /* local: actor -> actor */
    /* The CPU backend's run set (host memory of the view's own, NULL where blocks sweep their slots): one bit
     * per slot that may have work (`work`, 32 slots a word) and one bit per non-empty word (`work_summary`). */
    uint32_t *work;
    uint32_t *work_summary;
    int64_t clock_offset_ns; /* raw device clock + this = host time */
    uint32_t slot_count;
    uint32_t inbox_capacity;
    uint32_t outbox_capacity;
    uint32_t k2k_capacity;
    uint32_t command_capacity;
    uint32_t event_capacity;
    uint32_t state_bytes;
    uint32_t bulk_bytes; /* 0: no bulk areas (every payload inline) */
    const rv_behaviour_fn *behaviours; /* CPU backend: table indexed by id; NULL on CUDA */
} rv_grid_view;

struct rv_actor_ctx {
    const rv_grid_view *g;
    rv_control_block *cb;
    uint32_t slot;
    uint32_t generation;
    uint32_t init_phase;
    const rv_envelope *msg;
    uint64_t hlc;
    rv_envelope reply; /* the staged reply, built here and copied to the outbox on commit (16-byte stores) */
    uint32_t reply_staged;
    uint32_t reply_bulk;     /* the staged reply is large: its bytes wait in the outbox's bulk area ... */
    uint32_t reply_bulk_end; /* ... and on commit the area's producer counter moves to here */
    uint32_t reply_forwarded; /* the duty to reply went to another actor with rv_forward */
    uint32_t send_count;
    uint32_t routed_count; /* routed sends staged in the outbox past its tail (published on commit) */
    uint32_t stall_requested; /* the behaviour called rv_stall_for for a message of this step */
    rv_k2k_cell *send_cells[RV_MAX_SENDS_PER_MESSAGE];
    uint32_t send_pos[RV_MAX_SENDS_PER_MESSAGE];
};

#if RV_CUDA
/* Generated per program by the host (device/src/backend/cuda/source.rs): a switch over the registered behaviours. */
__device__ int rv_dispatch_generated(uint32_t behaviour, rv_actor_ctx *ctx, const rv_envelope *msg);
__device__ int rv_behaviour_known_generated(uint32_t behaviour);
#endif

RV_FN int rv_behaviour_known(const rv_grid_view *g, uint32_t behaviour) {
#if RV_CUDA
    (void)g;
    return rv_behaviour_known_generated(behaviour);
#else
    return behaviour < RV_MAX_BEHAVIOURS && g->behaviours != 0 && g->behaviours[behaviour] != 0;
#endif
}

RV_FN int rv_dispatch(const rv_grid_view *g, uint32_t behaviour, rv_actor_ctx *ctx, const rv_envelope *msg) {
    if (!rv_behaviour_known(g, behaviour)) return RV_ERR_UNKNOWN_BEHAVIOUR;
#if RV_CUDA
    return rv_dispatch_generated(behaviour, ctx, msg);
#else
    return g->behaviours[behaviour](ctx, msg);
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Addressing. Every index is masked; every slot index is checked by the caller.
 * ---------------------------------------------------------------------------------------------- */
RV_FN void rv_copy_envelope(rv_envelope *dst, const rv_envelope *src) {
    rv_copy16(dst, src, sizeof(rv_envelope) / 16);
}

RV_FN rv_envelope *rv_inbox_cell(const rv_grid_view *g, uint32_t slot, uint32_t index) {
    return g->inboxes + (uint64_t)slot * g->inbox_capacity + (index & (g->inbox_capacity - 1));
}
RV_FN rv_envelope *rv_outbox_cell(const rv_grid_view *g, uint32_t slot, uint32_t index) {
    return g->outboxes + (uint64_t)slot * g->outbox_capacity + (index & (g->outbox_capacity - 1));
}
RV_FN rv_k2k_cell *rv_k2k_cell_at(const rv_grid_view *g, uint32_t slot, uint32_t index) {
    return g->k2k_cells + (uint64_t)slot * g->k2k_capacity + (index & (g->k2k_capacity - 1));
}
RV_FN uint8_t *rv_state_region(const rv_grid_view *g, uint32_t slot) {
    return g->state + (uint64_t)slot * g->state_bytes;
}

/* Host time (CLOCK_REALTIME ns) as the device sees it: its raw clock corrected by the offset the host measured. */
RV_FN uint64_t rv_grid_now_ns(const rv_grid_view *g) { return (uint64_t)((int64_t)rv_now_ns() + g->clock_offset_ns); }
/* rv_grid_now_ns at a few milliseconds' resolution, where that will do (rv_now_coarse_ns). */
RV_FN uint64_t rv_grid_coarse_ns(const rv_grid_view *g) {
    return (uint64_t)((int64_t)rv_now_coarse_ns() + g->clock_offset_ns);
}

RV_FN uint64_t rv_hlc_next(uint64_t local, uint64_t remote, uint64_t now_ns) {
    uint64_t physical = (now_ns / 1000000ull) << 16;
    uint64_t logical = (local > remote ? local : remote) + 1;
    return physical > logical ? physical : logical;
}

/* Whoever gives `slot` work (block 0, a kernel-to-kernel sender; the host through rv_cpu_mark_work) marks it in
 * the run set after publishing the work: the word's bit, then the summary's. The runner of a word clears the
 * summary bit before it takes the word's bits, and both before its steps read anything, so no mark is lost. A
 * marker that finds the bit set already skips the summary: whoever set the bit sets the summary after it, and a
 * runner that cleared the summary sets it again while bits are left in the word (rv_cpu_take_one_marked).
 * Returns 1 if this call set the bit. Without a run set (CUDA: every block sweeps its slots) nothing is done. */
RV_FN uint32_t rv_mark_work(const rv_grid_view *g, uint32_t slot) {
    if (g->work == 0) return 0;
    uint32_t word = slot >> 5;
    uint32_t bit = 1u << (slot & 31u);
    if (rv_fetch_or_u32(&g->work[word], bit) & bit) return 0;
    rv_fetch_or_u32(&g->work_summary[word >> 5], 1u << (word & 31u));
    return 1;
}

/* Words of the attention bitmap: one bit per slot. A summary follows them in the same area, one bit per word
 * (rv_attention_summary), so block 0 looks only at the words that have a bit set, not at all of them. */
RV_FN uint32_t rv_attention_words(uint32_t slot_count) { return (slot_count + 31u) / 32u; }

RV_FN uint32_t *rv_attention_summary(const rv_grid_view *g) {
    return g->attention + rv_attention_words(g->slot_count);
}

/* The slot's bit first, then its word's summary bit: block 0 clears a summary bit before it takes the word
 * (rv_keeper_step), so a bit it misses is announced again by the summary bit set after it. */
RV_FN void rv_raise_attention(const rv_grid_view *g, uint32_t slot) {
    uint32_t word = slot >> 5;
    rv_fetch_or_u32(&g->attention[word], 1u << (slot & 31u));
    rv_fetch_or_u32(&rv_attention_summary(g)[word >> 5], 1u << (word & 31u));
}

/* ------------------------------------------------------------------------------------------------
 * Bulk areas: a slot's byte rings for payloads over RV_PAYLOAD_BYTES (see rv_bulk_ref in rv_layout.h).
 * ---------------------------------------------------------------------------------------------- */
/* The reference a bulk envelope carries (its end: what consuming it frees up to). */
RV_FN rv_bulk_ref rv_bulk_ref_of(const rv_envelope *e) {
    rv_bulk_ref r;
    rv_copy_bytes(&r, e->payload, sizeof(r));
    return r;
}

/* Where the bytes an envelope's bulk reference names lie in `slot`'s area of `areas`, or NULL when the
 * reference is malformed or names anything outside that one area (whatever the values, nothing outside it is
 * ever read or written through it). */
RV_FN uint8_t *rv_bulk_at(const rv_grid_view *g, uint8_t *areas, uint32_t slot, const rv_envelope *e) {
    uint32_t size = g->bulk_bytes;
    if (size == 0 || !(e->flags & RV_FLAG_BULK) || e->payload_len != sizeof(rv_bulk_ref)) return 0;
    rv_bulk_ref r = rv_bulk_ref_of(e);
    uint32_t start = (r.end - r.len) & (size - 1);
    if (r.len > size || start + r.len > size) return 0; /* both terms <= RV_MAX_BULK_BYTES: no overflow */
    return areas + (uint64_t)slot * size + start;
}

/* Reserves `len` bytes (1 to `size`) in a bulk area of `size` bytes whose producer counter is `tail` and
 * consumer counter `head`: 16-byte aligned, never wrapping (skips to the area's start when the rest is too
 * short). The bytes in use are [head, tail): the new ones fit if they end within `size` of `head`, or anywhere
 * when nothing is in use (head == tail). Returns the new producer counter (the reference's end), or `tail`
 * itself when there is no room now. */
RV_FN uint32_t rv_bulk_reserve(uint32_t size, uint32_t tail, uint32_t head, uint32_t len) {
    uint32_t start = (tail + 15u) & ~15u;
    if ((start & (size - 1)) + len > size) start = (start + size - 1) & ~(size - 1);
    uint32_t end = start + len;
    return (end - head > size && head != tail) ? tail : end;
}

/* Makes `e` a reference to `len` bytes ending at `end`. */
RV_FN void rv_bulk_ref_set(rv_envelope *e, uint32_t end, uint32_t len) {
    rv_bulk_ref r;
    r.end = end;
    r.len = len;
    e->flags |= (uint8_t)RV_FLAG_BULK;
    e->payload_len = (uint16_t)sizeof(r);
    rv_copy_bytes(e->payload, &r, sizeof(r));
}

/* Copies `len` bytes from anywhere to the start of a bulk reservation (16-byte aligned) in whole 16-byte units,
 * the last one padded: one 16-byte store each on the GPU, where the shared areas are host memory across PCIe.
 * A reservation owns its bytes up to the next 16-byte boundary (the next one starts there at the earliest, and
 * areas are multiples of 16 bytes). */
RV_FN void rv_copy_to_bulk(uint8_t *dst, const void *src, uint32_t len) {
    const uint8_t *from = (const uint8_t *)src;
    uint32_t off = 0;
    if (((uint64_t)from & 15u) == 0) { /* an aligned source (another bulk area: an echo) is read 16 bytes at a time */
        off = len & ~15u;
        rv_copy16(dst, from, off / 16u);
    }
    for (; off < len; off += 16) {
        RV_ALIGN(16) uint8_t unit[16];
        uint32_t n = len - off < 16u ? len - off : 16u;
        for (uint32_t i = 0; i < 16u; ++i) unit[i] = i < n ? from[off + i] : 0;
        rv_copy16(dst + off, unit, 1);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Layout: computed once, on the host, from the requested sizes. Written into the header.
 * ---------------------------------------------------------------------------------------------- */
RV_FN int rv_is_pow2(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }
RV_FN uint64_t rv_align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

/* Returns RV_OK, or RV_ERR_BAD_COMMAND when a size is zero, not a power of two, or too large. */
RV_STEP_API int rv_compute_layout(const rv_grid_params *p, rv_grid_header *h) {
    if (p->slot_count == 0 || p->slot_count > (1u << 24)) return RV_ERR_BAD_COMMAND;
    if (!rv_is_pow2(p->inbox_capacity) || !rv_is_pow2(p->outbox_capacity) || !rv_is_pow2(p->k2k_capacity) ||
        !rv_is_pow2(p->command_capacity) || !rv_is_pow2(p->event_capacity))
        return RV_ERR_BAD_COMMAND;
    if (p->inbox_capacity > (1u << 20) || p->outbox_capacity > (1u << 20) || p->k2k_capacity > (1u << 20) ||
        p->command_capacity > (1u << 20) || p->event_capacity > (1u << 20))
        return RV_ERR_BAD_COMMAND;
    if (p->state_bytes == 0 || p->state_bytes % 64 != 0 || p->state_bytes > (1u << 24)) return RV_ERR_BAD_COMMAND;
    if (p->bulk_bytes != 0 && (!rv_is_pow2(p->bulk_bytes) || p->bulk_bytes < 256 || p->bulk_bytes > RV_MAX_BULK_BYTES))
        return RV_ERR_BAD_COMMAND;
    rv_zero_bytes(h, sizeof(rv_grid_header));
    h->magic = RV_MAGIC;
    h->version = RV_PROTOCOL_VERSION;
    h->slot_count = p->slot_count;
    h->inbox_capacity = p->inbox_capacity;
    h->outbox_capacity = p->outbox_capacity;
    h->k2k_capacity = p->k2k_capacity;
    h->command_capacity = p->command_capacity;
    h->event_capacity = p->event_capacity;
    h->state_bytes = p->state_bytes;
    h->payload_bytes = RV_PAYLOAD_BYTES;
    h->bulk_bytes = p->bulk_bytes;
    uint64_t n = p->slot_count;
    uint64_t off = sizeof(rv_grid_header);
    h->off_blocks = off;
    off = rv_align_up(off + n * sizeof(rv_control_block), 64);
    h->off_commands = off;
    off = rv_align_up(off + (uint64_t)p->command_capacity * sizeof(rv_command), 64);
    h->off_events = off;
    off = rv_align_up(off + (uint64_t)p->event_capacity * sizeof(rv_event), 64);
    h->off_inboxes = off;
    off = rv_align_up(off + n * p->inbox_capacity * sizeof(rv_envelope), 64);
    h->off_outboxes = off;
    off = rv_align_up(off + n * p->outbox_capacity * sizeof(rv_envelope), 64);
    h->off_doorbells = off;
    off = rv_align_up(off + (n + 1) * sizeof(uint32_t), 64);
    h->off_inbox_bulk = off;
    off = rv_align_up(off + n * p->bulk_bytes, 64);
    h->off_outbox_bulk = off;
    off = rv_align_up(off + n * p->bulk_bytes, 64);
    h->shared_bytes = off;
    off = sizeof(rv_local_header);
    h->off_keeper_records = off;
    off = rv_align_up(off + n * sizeof(rv_keeper_record), 64);
    h->off_actor_records = off;
    off = rv_align_up(off + n * sizeof(rv_actor_record), 64);
    h->off_attention = off;
    uint64_t attention_words = rv_attention_words(p->slot_count);
    off = rv_align_up(off + (attention_words + (attention_words + 31) / 32) * 4, 64); /* bitmap and summary */
    h->off_k2k_meta = off;
    off = rv_align_up(off + n * sizeof(rv_k2k_meta), 64);
    h->off_k2k_cells = off;
    off = rv_align_up(off + n * p->k2k_capacity * sizeof(rv_k2k_cell), 64);
    h->off_state = off;
    off = rv_align_up(off + n * p->state_bytes, 64);
    h->off_k2k_bulk = off;
    off = rv_align_up(off + n * p->bulk_bytes, 64);
    h->local_bytes = off;
    return RV_OK;
}

/* Builds a view over the two regions. Returns RV_OK or RV_ERR_BAD_COMMAND if the header is not ours. */
RV_STEP_API int rv_grid_view_init(rv_grid_view *v, void *shared, void *local, const rv_behaviour_fn *behaviours) {
    rv_grid_header *h = (rv_grid_header *)shared;
    if (h->magic != RV_MAGIC || h->version != RV_PROTOCOL_VERSION) return RV_ERR_BAD_COMMAND;
    uint8_t *s = (uint8_t *)shared;
    uint8_t *l = (uint8_t *)local;
    v->header = h;
    v->blocks = (rv_control_block *)(s + h->off_blocks);
    v->commands = (rv_command *)(s + h->off_commands);
    v->events = (rv_event *)(s + h->off_events);
    v->inboxes = (rv_envelope *)(s + h->off_inboxes);
    v->outboxes = (rv_envelope *)(s + h->off_outboxes);
    v->keepers = (rv_keeper_record *)(l + h->off_keeper_records);
    v->attention = (uint32_t *)(l + h->off_attention);
    v->k2k_meta = (rv_k2k_meta *)(l + h->off_k2k_meta);
    v->k2k_cells = (rv_k2k_cell *)(l + h->off_k2k_cells);
    v->state = l + h->off_state;
    v->local_header = (rv_local_header *)l;
    v->actors = (rv_actor_record *)(l + h->off_actor_records);
    v->doorbells = (uint32_t *)(s + h->off_doorbells);
    v->inbox_bulk = s + h->off_inbox_bulk;
    v->outbox_bulk = s + h->off_outbox_bulk;
    v->k2k_bulk = l + h->off_k2k_bulk;
    v->work = 0;
    v->work_summary = 0;
    v->clock_offset_ns = h->clock_offset_ns;
    v->slot_count = h->slot_count;
    v->inbox_capacity = h->inbox_capacity;
    v->outbox_capacity = h->outbox_capacity;
    v->k2k_capacity = h->k2k_capacity;
    v->command_capacity = h->command_capacity;
    v->event_capacity = h->event_capacity;
    v->state_bytes = h->state_bytes;
    v->bulk_bytes = h->bulk_bytes;
    v->behaviours = behaviours;
    return RV_OK;
}

/* Initialises one slot before the kernel starts (both regions are zeroed before): k2k sequence numbers, and
 * the control block fields whose zero is not "none". */
RV_STEP_API void rv_init_local_slot(const rv_grid_view *g, uint32_t slot) {
    if (slot >= g->slot_count) return;
    g->blocks[slot].failed_index = RV_NO_INDEX;
    for (uint32_t i = 0; i < g->k2k_capacity; ++i) rv_k2k_cell_at(g, slot, i)->seq = i;
}

#endif /* RV_PROTOCOL_VIEW_CU */
