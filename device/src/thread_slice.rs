//! A request to the kernel's scheduler for ringvisor's own host threads (the CPU backend's workers, the
//! pollers, the WebGPU executor): short time slices.
//!
//! Why: those threads hand work to each other, and each waits, spinning, then yielding, then parked, for the
//! next piece. On Linux since 6.6 (EEVDF), a thread that yielded its way through an idle spell has used up its
//! claim on the CPU; woken on a core that another process's thread is busy on, it waits for that thread's slice
//! to end (about 3-4 ms) instead of running at once. Every hop of a call or a restart that wakes such a thread
//! paid that whenever the machine's cores were busy. A thread with a short slice (Linux 6.12+: the
//! `sched_runtime` of `sched_setattr` for `SCHED_OTHER`, no privilege needed) gets an early deadline, and a woken
//! thread with an earlier deadline preempts the running one. Measured on the 2-core development VM beside two
//! busy threads (a pair of threads handing a value back and forth, each yielding 64 times before it parks):
//! 3.46 ms per round trip with the default slice, 3.8 µs with 100 µs slices. The threads still get their fair
//! share of the CPU: a short slice changes when a thread runs, not how much.
//!
//! Elsewhere (older Linux kernels ignore the request; other systems have no such call) nothing changes.

use std::time::Duration;

/// The slice ringvisor asks for its own threads by default
/// ([`DeviceConfig::thread_slice`](crate::DeviceConfig#structfield.thread_slice)): the shortest Linux accepts.
pub const DEFAULT_THREAD_SLICE: Duration = Duration::from_micros(100);

/// Asks the kernel to schedule the calling thread with time slices of `slice` (Linux clamps it to 0.1-100 ms;
/// `Duration::ZERO`: the system's default again), keeping its policy and nice value. Call it at the start of a
/// thread that waits for work handed to it by others, for example in `tokio::runtime::Builder::on_thread_start`
/// for the runtime that runs your supervisors (the `ringvisor` binary does). Returns whether the request was
/// accepted: false where the thread does not run under the normal policy (a real-time or batch thread is left as
/// it is) or the system has no such call; a Linux kernel older than 6.12 accepts it and ignores it.
pub fn request_thread_slice(slice: Duration) -> bool {
    imp::request(slice)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::time::Duration;

    /// `struct sched_attr` of `sched_setattr(2)`, its first version (48 bytes).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }

    /// A slice lent to the calling thread: its own settings, to give back ([`Lent::give_back`]).
    pub(super) struct Lent(SchedAttr);

    impl Lent {
        /// Sets the thread's own settings again (its own slice; the system's default if it had no slice of its own).
        pub(super) fn give_back(&self) {
            set(&self.0);
        }
    }

    /// Gives the calling thread `slice` if its own is longer and it runs under the normal policy; returns what to
    /// give back. One `sched_getattr` and one `sched_setattr`, and one more to give it back (its policy and nice
    /// value come with the slice it reads: [`request`]'s two further calls are not needed).
    pub(super) fn lend(slice: Duration) -> Option<Lent> {
        let mut attr = current_attr()?;
        if attr.policy != libc::SCHED_OTHER as u32 || u128::from(attr.runtime) <= slice.as_nanos() {
            return None;
        }
        let own = attr.runtime;
        attr.runtime = slice_ns(slice);
        if !set(&attr) {
            return None;
        }
        attr.runtime = if Some(own) == default_slice_ns() { 0 } else { own };
        Some(Lent(attr))
    }

    /// The slice a thread without a slice of its own gets (read once, on a thread made for it).
    fn default_slice_ns() -> Option<u64> {
        static DEFAULT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        *DEFAULT.get_or_init(|| {
            std::thread::spawn(|| if request(Duration::ZERO) { current_slice_ns() } else { None }).join().ok()?
        })
    }

    /// The calling thread's scheduling settings as the kernel reports them (`sched_getattr`).
    fn current_attr() -> Option<SchedAttr> {
        let mut attr =
            SchedAttr { size: 0, policy: 0, flags: 0, nice: 0, priority: 0, runtime: 0, deadline: 0, period: 0 };
        let size = std::mem::size_of::<SchedAttr>() as u32;
        // SAFETY: `attr` is writable and `size` bytes long; pid 0 is the calling thread.
        let r = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut SchedAttr, size, 0) };
        // the kernel writes its own struct size into `size`: ours is what a later sched_setattr reads
        attr.size = size;
        (r == 0).then_some(attr)
    }

    /// The calling thread's slice as the kernel reports it (`sched_getattr`), in nanoseconds.
    pub(super) fn current_slice_ns() -> Option<u64> {
        current_attr().map(|attr| attr.runtime)
    }

    /// `slice` as `sched_attr`'s runtime.
    fn slice_ns(slice: Duration) -> u64 {
        slice.as_nanos().min(u128::from(u64::MAX)) as u64
    }

    /// Sets the calling thread's scheduling settings (`sched_setattr`).
    fn set(attr: &SchedAttr) -> bool {
        // SAFETY: `attr` is a valid sched_attr of the size it declares, read by the kernel only during the call;
        // pid 0 is the calling thread.
        unsafe { libc::syscall(libc::SYS_sched_setattr, 0, attr as *const SchedAttr, 0) == 0 }
    }

    pub(super) fn request(slice: Duration) -> bool {
        // SAFETY: sched_getscheduler and getpriority read the calling thread's settings; no memory is passed.
        let (policy, nice) = unsafe {
            let policy = libc::sched_getscheduler(0);
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
            (policy, (*libc::__errno_location() == 0).then_some(nice))
        };
        let Some(nice) = nice else { return false };
        if policy != libc::SCHED_OTHER {
            return false;
        }
        set(&SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime: slice_ns(slice),
            deadline: 0,
            period: 0,
        })
    }
}

/// The device threads' short slice lent to a caller's thread while it yields, waiting for a device's answer; its
/// own slice back when dropped.
///
/// Why: under EEVDF a yield moves the yielder's deadline on by one of its own slices. A caller with the default
/// slice (1-4 ms) that yields once fell behind every device thread yielding in a loop on its core (100 µs slices)
/// until they had each yielded a few dozen times: about 40 µs, call after call, while the device's workers
/// shared the caller's core (`bench/examples/latency_probe.rs` with that placement forced: 44-49 µs a call, 15 µs
/// with the slice lent). Giving the device threads the default slice instead (tried) cost their share of a
/// core beside a user's thread that sends flat out and never yields. The caller's own slice is back before the
/// call returns (or sleeps): three system calls in all, on a call that has waited past its busy window already.
pub(crate) struct LentSlice {
    /// The thread's own settings, to give back; `None`: nothing was lent.
    restore: Option<imp::Lent>,
}

impl LentSlice {
    /// Lends `slice` to the calling thread if its own is longer (nothing for a thread that asked for as short a
    /// slice or shorter, or that does not run under the normal policy, or where the system has no such call).
    pub(crate) fn lend(slice: Option<Duration>) -> Self {
        Self { restore: slice.and_then(imp::lend) }
    }
}

impl Drop for LentSlice {
    fn drop(&mut self) {
        if let Some(lent) = &self.restore {
            lent.give_back();
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn request(_slice: std::time::Duration) -> bool {
        false
    }

    /// Nothing is ever lent here.
    pub(super) enum Lent {}

    impl Lent {
        pub(super) fn give_back(&self) {
            match *self {}
        }
    }

    pub(super) fn lend(_slice: std::time::Duration) -> Option<Lent> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use imp::current_slice_ns;

    /// Whether the running kernel is at least `major.minor` (from `uname -r`).
    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_normal_thread_gets_its_slice_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            // SAFETY: getpriority/setpriority on the calling thread (PRIO_PROCESS 0 is the thread on Linux);
            // raising the nice value needs no privilege.
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }.clamp(-20, 18) + 1;
            // SAFETY: as above.
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) }, 0);
            if !request_thread_slice(Duration::from_micros(300)) {
                // only a sandbox that forbids the call (seccomp: EPERM) or a kernel without it may refuse
                let refusal = std::io::Error::last_os_error().raw_os_error();
                assert!(matches!(refusal, Some(libc::EPERM | libc::ENOSYS)), "refused with {refusal:?}");
                eprintln!("sched_setattr refused here ({refusal:?}): nothing more to check");
                return;
            }
            // SAFETY: as above.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }, nice, "the nice value is kept");
            // SAFETY: sched_getscheduler of the calling thread.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
            if kernel_at_least(6, 12) {
                assert_eq!(current_slice_ns(), Some(300_000), "the kernel reports the slice asked for");
            }
        })
        .join()
        .unwrap();
    }

    /// A caller's thread runs with the lent slice until the loan is dropped, then with its own again (the system's
    /// default, or one it asked for); a thread whose own slice is as short keeps it.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_lent_slice_is_given_back_when_dropped() {
        std::thread::spawn(|| {
            let short = Duration::from_micros(100);
            if !request_thread_slice(Duration::ZERO) {
                eprintln!("sched_setattr refused here: nothing to check");
                return;
            }
            // where the kernel takes and reports slices (6.12+), it says which one the thread runs with
            let reports = kernel_at_least(6, 12);
            let own = current_slice_ns().expect("sched_getattr");
            {
                let lent = LentSlice::lend(Some(short));
                assert_eq!(lent.restore.is_some(), reports, "lent where slices are taken");
                if reports {
                    assert_eq!(current_slice_ns(), Some(100_000));
                }
            }
            assert_eq!(current_slice_ns(), Some(own), "the thread's own slice back");
            assert!(LentSlice::lend(None).restore.is_none(), "no slice to lend: nothing changes");

            assert!(request_thread_slice(Duration::from_micros(300)));
            drop(LentSlice::lend(Some(short)));
            if reports {
                assert_eq!(current_slice_ns(), Some(300_000), "a slice the thread asked for is restored as it was");
            }
            let kept = LentSlice::lend(Some(Duration::from_millis(1)));
            assert!(kept.restore.is_none(), "a thread whose own slice is shorter keeps it");
        })
        .join()
        .unwrap();
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_batch_thread_is_left_as_it_is() {
        std::thread::spawn(|| {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sets the calling thread's policy to SCHED_BATCH (allowed unprivileged) with a valid param.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
                let refusal = std::io::Error::last_os_error().raw_os_error();
                assert_eq!(refusal, Some(libc::EPERM), "only a sandbox may refuse SCHED_BATCH");
                eprintln!("sched_setscheduler refused here: nothing to check");
                return;
            }
            assert!(!request_thread_slice(DEFAULT_THREAD_SLICE));
            // SAFETY: sched_getscheduler of the calling thread.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_BATCH);
        })
        .join()
        .unwrap();
    }
}
