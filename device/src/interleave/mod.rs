//! The points where the simulator (`crate::sim`) may interleave the threads it runs, and what it does there: on a
//! simulated thread, every access of the shared region by the host's layer (`shared.rs`) and by the device code
//! (through `rv_sim_hook`, see `kernels/rv_port.h`) goes through the thread's [`Scheduler`] (`sched.rs`: the
//! turn, the clocks, the memory model). On every other thread these functions are never consulted beyond one
//! thread-local check ([`active`]).

mod sched;

use crate::ffi;
pub(crate) use sched::{Cost, Policy, Rng, Scheduler, Side};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

thread_local! {
    /// The scheduler and thread index of a simulated thread.
    static CURRENT: RefCell<Option<(Arc<Scheduler>, usize)>> = const { RefCell::new(None) };
}

/// Set once the simulator has run a thread in this process: until then no thread is one, and [`active`] answers
/// without its thread-local look (every access of the shared region asks, a dozen times per call).
static SIMULATING: AtomicBool = AtomicBool::new(false);

/// Whether the calling thread is one the simulator runs (the shared-region layer then goes through it).
pub(crate) fn active() -> bool {
    SIMULATING.load(Ordering::Relaxed) && CURRENT.with(|c| c.borrow().is_some())
}

fn with_current<R>(f: impl FnOnce(&Scheduler, usize) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow().as_ref().map(|(s, me)| f(s, *me)))
}

/// A load of `len` (4 or 8) bytes of the shared region by the host's layer on a simulated thread.
///
/// # Safety
/// `ptr` must be a live, aligned field of the shared region.
pub(crate) unsafe fn load(ptr: *const u8, len: usize) -> u64 {
    // SAFETY: the caller's guarantee.
    with_current(|s, me| unsafe { s.load(me, "load", ptr, len) }).unwrap_or(0)
}

/// A store of `len` (4 or 8) bytes of `value` by the host's layer on a simulated thread.
///
/// # Safety
/// As for [`load`].
pub(crate) unsafe fn store(ptr: *mut u8, len: usize, value: u64, release: bool) {
    let what = if release { "release" } else { "store" };
    // SAFETY: the caller's guarantee.
    with_current(|s, me| unsafe { s.store(me, what, ptr, len, value, release) });
}

/// A copy of `len` bytes out of the shared region by the host's layer (a record the other side published).
///
/// # Safety
/// `src` must lie in the shared region and both ranges be valid for `len` bytes.
pub(crate) unsafe fn read_bytes(dst: *mut u8, src: *const u8, len: usize) {
    with_current(|s, me| {
        s.point(me, "read", Cost::Shared);
        // SAFETY: the caller's guarantee.
        unsafe { s.read(me, dst, src, len) }
    });
}

/// A copy of `len` bytes into the shared region by the host's layer (a record it owns until it publishes it).
///
/// # Safety
/// As for [`read_bytes`], `dst` 8-byte aligned.
pub(crate) unsafe fn write_bytes(dst: *mut u8, src: *const u8, len: usize) {
    with_current(|s, me| {
        s.point(me, "write", Cost::Shared);
        // SAFETY: the caller's guarantee.
        unsafe { s.write(me, dst, src, len, false) }
    });
}

/// The simulated clock, as the device code reads it (an epoch of its own, as a GPU's global timer has).
const EPOCH_NS: u64 = 1_700_000_000_000_000_000;

/// `rv_sim_hook`: the device code's points (see `kernels/rv_port.h`).
extern "C" fn hook(op: u32, p: *mut core::ffi::c_void, value: u64) -> u64 {
    const LOAD: u32 = 1;
    const STORE: u32 = 2;
    const FENCE: u32 = 3;
    const SYNC: u32 = 4;
    const NOW: u32 = 5;
    const PAUSE: u32 = 6;
    const COPY: u32 = 7;
    const ORDERED: u32 = 0x10000;
    let size = ((op >> 8) & 0xff) as usize;
    let ordered = op & ORDERED != 0;
    with_current(|s, me| match op & 0xff {
        // SAFETY: the device code passes an aligned field of `size` (4 or 8) bytes.
        LOAD => unsafe { s.load(me, if ordered { "acquire" } else { "load" }, p as *const u8, size) },
        STORE => {
            // SAFETY: as for LOAD.
            unsafe { s.store(me, if ordered { "release" } else { "store" }, p as *mut u8, size, value, ordered) };
            0
        }
        FENCE => {
            s.point(me, "fence", Cost::Other);
            s.release(me);
            0
        }
        SYNC => {
            s.point(me, if ordered { "rmw/local" } else { "local" }, Cost::Other);
            if ordered {
                s.release(me);
            }
            0
        }
        NOW => EPOCH_NS + s.now_ns(me),
        PAUSE => {
            s.sleep(me, value);
            0
        }
        COPY => {
            // SAFETY: the device code passes a live rv_sim_copy_args.
            let args = unsafe { &*(p as *const CopyArgs) };
            let len = args.bytes as usize;
            s.point(me, "copy", Cost::Shared);
            let mut staged = vec![0u8; len];
            // SAFETY: the device code's ranges are valid for `len` bytes; a 16-byte copy's are 16-byte aligned.
            unsafe {
                if !args.src.is_null() {
                    s.read(me, staged.as_mut_ptr(), args.src, len);
                }
                s.write(me, args.dst, staged.as_ptr(), len, false);
            }
            0
        }
        _ => 0,
    })
    .unwrap_or(0)
}

/// `struct rv_sim_copy_args`.
#[repr(C)]
struct CopyArgs {
    dst: *mut u8,
    src: *const u8,
    bytes: u64,
}

/// Installs the device code's hook (once per process).
pub(crate) fn install_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: `hook` has the signature rv_sim_hook_fn declares and lives for the whole process.
    ONCE.call_once(|| unsafe { ffi::rv_sim_install(hook) });
}

/// Makes the calling thread simulated thread `me` of `sched` (the device code's points included).
pub(crate) fn enter(sched: &Arc<Scheduler>, me: usize) {
    // before the thread-local: a thread that sees it unset is not this one (it asks from its own thread)
    SIMULATING.store(true, Ordering::Relaxed);
    CURRENT.with(|c| *c.borrow_mut() = Some((sched.clone(), me)));
}

/// Makes the calling thread an ordinary one again.
pub(crate) fn leave() {
    CURRENT.with(|c| *c.borrow_mut() = None);
}
