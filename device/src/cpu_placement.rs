//! Where ringvisor's own threads run, and moving one off a CPU: the cure of the latency mode's trap.
//!
//! The trap: on a machine with few cores, the latency mode's device threads (the CPU backend's workers and the
//! poller) never park, so no core ever goes idle and Linux's scheduler has no reason to look at where they run.
//! When both workers land on the CPU of a thread that calls the device, while the poller holds the other one,
//! every call waits for its CPU to be handed round by yields: 15-20 µs a call instead of 300 ns, for as long as
//! the placement lasts (the scheduler's periodic balancing moves a worker after tens of milliseconds, or never,
//! when a benchmark's other threads keep stirring the placement). The caller cannot run the actor's step itself
//! (a behaviour that never returns would hold the caller past its timeout), and should not be moved (it is the
//! user's thread), so a waiting caller that finds every worker recorded on its own CPU moves one of them off
//! it: the worker's affinity without that CPU (the kernel migrates it at once), then its own affinity again
//! (which does not move it back).
//!
//! Elsewhere than Linux nothing is known and nothing moves.

/// The CPU the calling thread runs on now, if the system says.
pub(crate) fn current_cpu() -> Option<u32> {
    imp::current_cpu()
}

/// The calling thread's id for [`move_off_cpu`], if the system has one.
pub(crate) fn current_thread_id() -> Option<i32> {
    imp::current_thread_id()
}

/// Moves thread `tid` of this process off `cpu`, if it may run elsewhere: its affinity without `cpu`, then its
/// affinity again. Returns whether the affinity was changed (false: the thread may run on `cpu` alone, or the
/// system refused or has no such call).
pub(crate) fn move_off_cpu(tid: i32, cpu: u32) -> bool {
    imp::move_off_cpu(tid, cpu)
}

#[cfg(target_os = "linux")]
mod imp {
    pub(super) fn current_cpu() -> Option<u32> {
        // SAFETY: sched_getcpu takes nothing and returns the CPU or -1.
        let cpu = unsafe { libc::sched_getcpu() };
        u32::try_from(cpu).ok()
    }

    pub(super) fn current_thread_id() -> Option<i32> {
        // SAFETY: gettid takes nothing and cannot fail.
        Some(unsafe { libc::gettid() })
    }

    pub(super) fn move_off_cpu(tid: i32, cpu: u32) -> bool {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let cpu = cpu as usize;
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        // SAFETY: an all-zero cpu_set_t is an empty set; sched_getaffinity writes at most `size` bytes into it.
        let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sched_getaffinity(tid, size, &mut allowed) } != 0 {
            return false;
        }
        let mut elsewhere = allowed;
        // SAFETY: cpu < CPU_SETSIZE (checked above): CPU_ISSET and CPU_CLR stay inside the set.
        let (on, others) = unsafe {
            let on = libc::CPU_ISSET(cpu, &allowed);
            libc::CPU_CLR(cpu, &mut elsewhere);
            (on, libc::CPU_COUNT(&elsewhere))
        };
        if !on || others == 0 {
            return false;
        }
        // SAFETY: both sets are initialised cpu_set_t values of `size` bytes; the calls only read them. Setting
        // `elsewhere` migrates the thread if it runs on `cpu`; setting `allowed` again leaves it where it is.
        unsafe {
            if libc::sched_setaffinity(tid, size, &elsewhere) != 0 {
                return false;
            }
            if libc::sched_setaffinity(tid, size, &allowed) != 0 {
                tracing::warn!(tid, cpu, "could not give a device thread its CPUs back after moving it");
            }
        }
        true
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn current_cpu() -> Option<u32> {
        None
    }

    pub(super) fn current_thread_id() -> Option<i32> {
        None
    }

    pub(super) fn move_off_cpu(_tid: i32, _cpu: u32) -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A thread is moved off its CPU when it may run elsewhere, and keeps every CPU it had (on a machine with one
    /// CPU, or a thread allowed one, nothing moves and the call says so). Where it runs afterwards is not
    /// asserted: the scheduler may move it back at any time on a loaded machine.
    #[test]
    fn a_thread_is_moved_off_its_cpu_when_it_may_run_elsewhere_and_keeps_its_affinity() {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send((current_thread_id().unwrap(), current_cpu().unwrap())).unwrap();
            // spin until told, so that the thread is running (or runnable) when it is moved
            while done_rx.try_recv().is_err() {
                std::hint::spin_loop();
            }
        });
        let (tid, cpu) = rx.recv().unwrap();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: as in move_off_cpu.
        let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as in move_off_cpu.
        assert_eq!(unsafe { libc::sched_getaffinity(tid, size, &mut before) }, 0);
        // SAFETY: reads the set.
        let cpus = unsafe { libc::CPU_COUNT(&before) };
        let moved = move_off_cpu(tid, cpu);
        assert_eq!(moved, cpus > 1, "moved only if it may run elsewhere ({cpus} CPUs allowed)");
        // SAFETY: as in move_off_cpu.
        let mut after: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as in move_off_cpu.
        assert_eq!(unsafe { libc::sched_getaffinity(tid, size, &mut after) }, 0);
        // SAFETY: reads both sets.
        assert!(unsafe { libc::CPU_EQUAL(&before, &after) }, "the thread's affinity is what it was");
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    /// A CPU the thread may not run on is no reason to touch it; nor is a CPU number past what the set can hold.
    #[test]
    fn nothing_moves_for_a_cpu_the_thread_may_not_run_on() {
        let tid = current_thread_id().unwrap();
        assert!(!move_off_cpu(tid, libc::CPU_SETSIZE as u32), "past the set");
        assert!(!move_off_cpu(tid, libc::CPU_SETSIZE as u32 - 1), "a CPU outside its affinity");
    }
}
