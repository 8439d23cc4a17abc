//! The emulated driver's state: allocations, modules, streams, events, running kernels, and what a kernel's
//! blocks do when they get a resident slot and when they leave.

use super::super::driver::{DriverError, Handle};
use crate::ffi::BehaviourFn;
use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Default)]
pub(super) struct Emu {
    /// Released by kernel threads when they finish, acquired by the host when it sees a kernel completed:
    /// the happens-before edge made in instrumented C (`rv_emu_completed` / `rv_emu_observed`).
    pub completions: AtomicU32,
    pub state: Mutex<State>,
    pub changed: Condvar,
    pub blocking_waits: AtomicU64,
    pub resets: AtomicU32,
}

pub(super) struct Region {
    pub size: usize,
    pub layout: Layout,
    /// A memset ordered on this stream, at this operation number, not yet known to have completed.
    pub pending_memset: Option<(Handle, u64)>,
}

pub(super) struct Kernel {
    pub stream: Handle,
    pub persistent: bool,
    pub blocks_left: u32,
    pub error: Option<DriverError>,
    pub terminate: Option<usize>,
}

#[derive(Default)]
pub(super) struct State {
    pub retained: u32,
    pub sticky: Option<DriverError>,
    pub next: u64,
    pub ops: u64,
    pub regions: HashMap<usize, Region>,
    pub modules: HashMap<Handle, Arc<[Option<BehaviourFn>]>>,
    pub functions: HashMap<Handle, (Handle, &'static str)>,
    pub streams: HashMap<Handle, Vec<u64>>,
    pub events: HashMap<Handle, Option<(Handle, u64, Option<u64>)>>,
    pub kernels: HashMap<u64, Kernel>,
    pub finished: HashMap<u64, Option<DriverError>>,
    pub resident: u32,
    /// Resident blocks held by "another process" (see `occupy`).
    pub foreign: u32,
    pub violations: Vec<String>,
    pub leaked: usize,
}

impl State {
    pub fn handle(&mut self) -> Handle {
        self.next += 1;
        self.next
    }

    pub fn usable(&self, call: &'static str) -> Result<(), DriverError> {
        if let Some(e) = &self.sticky {
            return Err(DriverError { call, ..e.clone() });
        }
        if self.retained == 0 {
            return Err(DriverError::new(call, "CUDA_ERROR_INVALID_CONTEXT"));
        }
        Ok(())
    }

    pub fn violation(&mut self, call: &'static str, what: String) -> DriverError {
        tracing::error!(call, "emulated CUDA driver: {what}");
        self.violations.push(format!("{call}: {what}"));
        DriverError::new(call, format!("RULE VIOLATED: {what}"))
    }

    pub fn live_persistent(&self) -> usize {
        self.kernels.values().filter(|k| k.persistent).count()
    }

    pub fn no_persistent_kernel(&mut self, call: &'static str) -> Result<(), DriverError> {
        match self.live_persistent() {
            0 => Ok(()),
            n => Err(self.violation(
                call,
                format!("called while {n} persistent kernel(s) of the context run: the real call waits for them"),
            )),
        }
    }

    pub fn region_of(&self, ptr: u64) -> Option<(usize, &Region)> {
        self.regions.iter().find(|(&a, r)| ptr as usize >= a && (ptr as usize) < a + r.size).map(|(&a, r)| (a, r))
    }

    pub fn clear_pending(&mut self, stream: Handle, up_to: u64) {
        for r in self.regions.values_mut() {
            if matches!(r.pending_memset, Some((s, op)) if s == stream && op <= up_to) {
                r.pending_memset = None;
            }
        }
    }

    pub fn free_all(&mut self) -> usize {
        let n = self.regions.len() + self.modules.len() + self.streams.len() + self.events.len();
        for (addr, r) in self.regions.drain() {
            // SAFETY: allocated by `alloc` with this layout; no kernel runs (callers check).
            unsafe { std::alloc::dealloc(addr as *mut u8, r.layout) };
        }
        self.modules.clear();
        self.functions.clear();
        self.streams.clear();
        self.events.clear();
        n
    }
}

/// The host learned that a kernel completed: acquire what its threads wrote (see `Emu::completions`).
pub(super) fn observed(emu: &Emu) {
    // SAFETY: an AtomicU32's storage, read only atomically.
    unsafe { crate::ffi::rv_emu_observed(emu.completions.as_ptr()) };
}

pub(super) fn lock(emu: &Emu) -> MutexGuard<'_, State> {
    emu.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Fails every running kernel with `error` and makes it the context's sticky error.
pub(super) fn kill_all(emu: &Emu, st: &mut State, error: DriverError) {
    for k in st.kernels.values_mut() {
        k.error.get_or_insert_with(|| error.clone());
        if let Some(addr) = k.terminate {
            // SAFETY: the header of a live allocation (frees are refused while the kernel runs); the blocks read
            // the word atomically. The emulation's way to stop a kernel the hardware would tear down.
            unsafe { (*(addr as *const AtomicU32)).store(1, Ordering::Release) };
        }
    }
    st.sticky.get_or_insert(error);
    emu.changed.notify_all();
}

/// One block, or a short kernel's blocks in turn, got a resident slot and ran: book-keeping after.
pub(super) fn block_done(emu: &Emu, kernel: u64, blocks: u32) {
    // SAFETY: an AtomicU32's storage, updated only atomically.
    unsafe { crate::ffi::rv_emu_completed(emu.completions.as_ptr()) };
    let mut st = lock(emu);
    st.resident -= 1;
    let done = match st.kernels.get_mut(&kernel) {
        Some(k) => {
            k.blocks_left -= blocks;
            k.blocks_left == 0
        }
        None => false,
    };
    if done {
        let k = st.kernels.remove(&kernel).expect("present");
        if let Some(list) = st.streams.get_mut(&k.stream) {
            list.retain(|&id| id != kernel);
        }
        st.finished.insert(kernel, k.error);
    }
    emu.changed.notify_all();
}

pub(super) fn wait_resident(emu: &Emu, capacity: u32) {
    let mut st = lock(emu);
    while st.resident >= capacity {
        st = emu.changed.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    st.resident += 1;
}

/// The `.version X.Y` directive of a PTX text.
pub(super) fn ptx_version(text: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(text.strip_suffix(&[0]).unwrap_or(text)).ok()?;
    let line = text.lines().map(str::trim).find(|l| l.starts_with(".version"))?;
    let (major, minor) = line.trim_start_matches(".version").trim().split_once('.')?;
    Some((major.parse().ok()?, minor.trim().parse().ok()?))
}
