//! What this process knows about each GPU it uses, across devices: the resident blocks its persistent kernels
//! hold, whether a kernel fault left the context with a sticky error, and the resources waiting to be freed.
//!
//! Why: every device of a process shares the GPU's primary context. `cuMemFree`, `cuMemFreeHost` and
//! `cuModuleUnload` wait for every kernel of the context, and a persistent kernel never ends: a device released
//! while another device's kernel runs (a device restart opens the new device first) would hang. So release
//! happens while the context's persistent kernels are paused (`quiesce.rs`), or, when one does not pause or the
//! context holds a sticky error, is deferred until no persistent kernel of the context runs. Likewise the grid of
//! a new kernel must fit in what the other kernels leave resident, with headroom for short kernels.

use super::driver::{DevPtr, Driver, Handle};
use super::quiesce::{Kernels, PAUSE_WAIT};
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Everything one executor allocated in a context. Freed by [`release`] once no persistent kernel runs.
#[derive(Default)]
pub(crate) struct Resources {
    pub ordinal: i32,
    pub key: u64,
    pub ctx: Option<Handle>,
    /// The context generation these were allocated in (a reset destroys them).
    pub generation: u64,
    pub module: Option<Handle>,
    pub stream: Option<Handle>,
    pub event: Option<Handle>,
    pub shared: Option<*mut u8>,
    pub local: Option<DevPtr>,
    /// Resident blocks reserved for this executor's kernel.
    pub reserved_blocks: u32,
    /// The persistent kernel was launched and has not been seen to leave.
    pub kernel_live: bool,
}

// SAFETY: the host pointer is only freed, through the driver, by whoever holds the Resources.
unsafe impl Send for Resources {}

#[derive(Default)]
struct GpuBook {
    reserved_blocks: u32,
    live_kernels: u32,
    sticky: Option<String>,
    generation: u64,
    deferred: Vec<Resources>,
    /// The running persistent kernels, paused around the driver calls that would wait for them.
    kernels: Arc<Kernels>,
}

static BOOKS: Mutex<Option<HashMap<u64, GpuBook>>> = Mutex::new(None);

fn with_book<T>(key: u64, f: impl FnOnce(&mut GpuBook) -> T) -> T {
    let mut books = lock(&BOOKS);
    f(books.get_or_insert_with(HashMap::new).entry(key).or_default())
}

/// The persistent kernels of GPU `key` (to pause them around a driver call that would wait for them).
pub(crate) fn kernels(key: u64) -> Arc<Kernels> {
    with_book(key, |book| book.kernels.clone())
}

/// Headroom kept free on every GPU for short kernels (another device's init): an eighth, at least one block.
pub(crate) fn headroom(capacity: u32) -> u32 {
    (capacity / 8).max(1)
}

/// Before using the context of GPU `key`: if a kernel fault left it with a sticky error, reset it (every kernel
/// of it is dead; resources of the old generation are gone). Returns the generation to allocate in.
pub(crate) fn prepare_context(driver: &dyn Driver, ordinal: i32, key: u64) -> Result<u64, super::DriverError> {
    let mut books = lock(&BOOKS);
    let book = books.get_or_insert_with(HashMap::new).entry(key).or_default();
    if let Some(cause) = book.sticky.take() {
        tracing::warn!(%cause, "resetting the CUDA context after a kernel fault");
        driver.reset_context(ordinal)?;
        book.generation += 1;
        // the reset destroyed what was waiting to be freed; only their context retentions remain
        for r in book.deferred.drain(..) {
            if r.ctx.is_some() {
                let _ = driver.release_context(r.ordinal);
            }
        }
        book.live_kernels = 0;
        book.reserved_blocks = 0;
    }
    Ok(book.generation)
}

/// Reserves up to `wanted` resident blocks (at least 2: block 0 and one actor block) of a GPU with `capacity`,
/// keeping [`headroom`] free. Returns how many were reserved.
pub(crate) fn reserve_blocks(key: u64, capacity: u32, wanted: u32) -> Result<u32, String> {
    with_book(key, |book| {
        let free = capacity.saturating_sub(book.reserved_blocks).saturating_sub(headroom(capacity));
        if free < 2 {
            return Err(format!(
                "the GPU keeps {capacity} blocks resident; this process's other devices hold {} and {} stay free for \
                 short kernels: no room for another persistent kernel",
                book.reserved_blocks,
                headroom(capacity)
            ));
        }
        let n = wanted.min(free);
        book.reserved_blocks += n;
        Ok(n)
    })
}

/// A persistent kernel was launched.
pub(crate) fn kernel_started(key: u64) {
    with_book(key, |book| book.live_kernels += 1);
}

/// A persistent kernel left (`sticky`: with a fault that poisoned the context). Frees what was deferred once
/// no persistent kernel of the context runs.
pub(crate) fn kernel_left(driver: &Arc<dyn Driver>, res: &mut Resources, sticky: Option<String>) {
    let ready = with_book(res.key, |book| {
        if res.kernel_live {
            book.live_kernels = book.live_kernels.saturating_sub(1);
        }
        book.reserved_blocks = book.reserved_blocks.saturating_sub(res.reserved_blocks);
        if sticky.is_some() {
            book.sticky = sticky;
        }
        if book.live_kernels == 0 && book.sticky.is_none() {
            std::mem::take(&mut book.deferred)
        } else {
            Vec::new()
        }
    });
    res.kernel_live = false;
    res.reserved_blocks = 0;
    for r in ready {
        free_now(driver.as_ref(), r);
    }
}

/// Releases `res`: now, while the context's other persistent kernels are paused; when one does not pause, or a
/// kernel fault poisoned the context, once the last persistent kernel has left. A kernel that never left
/// (abandoned) keeps its resources forever: freeing them would hang or pull memory from under it.
pub(crate) fn release(driver: &Arc<dyn Driver>, mut res: Resources) {
    if res.kernel_live {
        tracing::error!("the persistent kernel never left: its memory and context are leaked, not freed under it");
        return;
    }
    if res.reserved_blocks > 0 {
        kernel_left(driver, &mut res, None);
    }
    enum Now {
        Deferred,
        Everything,
        ContextOnly,
    }
    let now = with_book(res.key, |book| {
        if res.generation != book.generation {
            Now::ContextOnly // a reset destroyed everything else
        } else if book.sticky.is_some() {
            book.deferred.push(std::mem::take(&mut res));
            Now::Deferred
        } else {
            Now::Everything
        }
    });
    match now {
        Now::Deferred => {}
        Now::Everything => {
            // Other devices' kernels may run (a device restart opens the new device before the old one is
            // dropped): free while they are paused, or defer if one does not pause.
            let kernels = kernels(res.key);
            let mut res = Some(res); // freed by the quiesce, or kept for later if it fails
            let freed = kernels.quiesced(PAUSE_WAIT, || {
                if let Some(r) = res.take() {
                    free_now(driver.as_ref(), r);
                }
            });
            if let Err(e) = freed {
                tracing::warn!(error = %e, "cuda release deferred until no persistent kernel of the context runs");
                if let Some(r) = res.take() {
                    with_book(r.key, |book| book.deferred.push(r));
                }
            }
        }
        Now::ContextOnly => {
            let Resources { ordinal, key, ctx, generation, .. } = res;
            free_now(driver.as_ref(), Resources { ordinal, key, ctx, generation, ..Resources::default() });
        }
    }
}

fn free_now(driver: &dyn Driver, r: Resources) {
    let Some(ctx) = r.ctx else { return };
    let report = |what: &str, e: Result<(), super::DriverError>| {
        if let Err(e) = e {
            tracing::warn!(error = %e, "cuda release: {what}");
        }
    };
    if let Some(e) = r.event {
        report("event", driver.destroy_event(ctx, e));
    }
    if let Some(s) = r.stream {
        report("stream", driver.destroy_stream(ctx, s));
    }
    if let Some(m) = r.module {
        report("module", driver.unload_module(ctx, m));
    }
    if let Some(l) = r.local {
        report("device memory", driver.free_device(ctx, l));
    }
    if let Some(s) = r.shared {
        report("mapped memory", driver.free_mapped(ctx, s));
    }
    report("context", driver.release_context(r.ordinal));
}
