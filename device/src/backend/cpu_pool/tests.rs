//! Tests of the worker pool: which worker moves off a waiting caller's CPU, where workers record that they run, and
//! how an idle worker spends its spinning rounds watching a slot.

use super::*;

fn seen(tid: i32, cpu: u32) -> Seen {
    Seen { tid, cpu }
}

/// A grid that records the watches asked of it and answers with `found`; `marked`: its run set has marks.
struct FakeGrid {
    watches: Mutex<Vec<(u32, u32)>>,
    found: bool,
    marked: bool,
    terminating: AtomicBool,
}

impl FakeGrid {
    fn new(found: bool, marked: bool) -> Arc<Self> {
        Arc::new(Self { watches: Mutex::new(Vec::new()), found, marked, terminating: AtomicBool::new(false) })
    }

    fn watches(&self) -> Vec<(u32, u32)> {
        self.watches.lock().unwrap().clone()
    }
}

/// The pool's list of `fakes`.
fn grids<const N: usize>(fakes: &[Arc<FakeGrid>; N]) -> Vec<Grid> {
    fakes.iter().map(|f| f.clone() as Grid).collect()
}

impl PoolGrid for FakeGrid {
    fn pass(&self, _: &WorkerState, _: usize) -> Pass {
        Pass { progress: false, replied: None }
    }
    fn watch(&self, _: &WorkerState, slot: u32, pauses: u32, elsewhere: &dyn Fn() -> bool) -> Watch {
        self.watches.lock().unwrap().push((slot, pauses));
        Watch { pauses, found_work: self.found || elsewhere() }
    }
    fn has_marked_work(&self) -> bool {
        self.marked
    }
    fn terminating(&self) -> &AtomicBool {
        &self.terminating
    }
}

/// An idle worker spends its spinning rounds watching the slot that replied last, at most `WATCH_PAUSES` at
/// a time, and the rounds count as spun: once they are spent it watches no more (it yields, then parks, as
/// before). Nothing to watch, or a grid gone from the list: its ordinary idle round.
#[test]
fn an_idle_worker_watches_the_slot_that_replied_last_for_its_spinning_rounds_only() {
    let fakes = [FakeGrid::new(false, false), FakeGrid::new(false, false)];
    let grids = grids(&fakes);
    let me = WorkerState::new();
    let mut backoff = IdleBackoff::new(1000, Duration::from_millis(1)).latency_mode(true);
    let left = backoff.spinning_pauses_left();
    assert!(left > WATCH_PAUSES, "the latency mode spins {left} pauses");
    assert!(!watch(&me, &grids, None, &mut backoff), "nothing to watch");
    assert!(!watch(&me, &grids, Some((2, 0)), &mut backoff), "a grid gone");
    assert_eq!(backoff.spinning_pauses_left(), left, "neither counted as spun");
    let mut watched = 0;
    while watch(&me, &grids, Some((1, 7)), &mut backoff) || backoff.spinning_pauses_left() > 0 {
        watched += 1;
        assert!(watched <= left, "the watches end");
    }
    let asked = fakes[1].watches();
    assert!(asked.iter().all(|&(slot, pauses)| slot == 7 && pauses > 0 && pauses <= WATCH_PAUSES), "{asked:?}");
    assert_eq!(asked.iter().map(|&(_, p)| p).sum::<u32>(), left, "exactly the spinning rounds");
    assert!(fakes[0].watches().is_empty());
    assert!(!watch(&me, &grids, Some((1, 7)), &mut backoff), "past spinning: no watch");
    assert_eq!(fakes[1].watches().len(), asked.len());
}

/// A watch ends when another grid of the pool has work (so one grid's watch keeps no other device waiting),
/// and what it found resets nothing here: the worker's loop does.
#[test]
fn a_watch_sees_work_in_the_pools_other_grids() {
    let me = WorkerState::new();
    let backoff = || IdleBackoff::new(4, Duration::from_millis(1));
    let quiet = grids(&[FakeGrid::new(false, false), FakeGrid::new(false, false)]);
    assert!(!watch(&me, &quiet, Some((0, 1)), &mut backoff()));
    let busy = grids(&[FakeGrid::new(false, false), FakeGrid::new(false, true)]);
    assert!(watch(&me, &busy, Some((0, 1)), &mut backoff()), "grid 1 has marks");
    let own = grids(&[FakeGrid::new(false, true), FakeGrid::new(false, false)]);
    assert!(!watch(&me, &own, Some((0, 1)), &mut backoff()), "the watched grid's marks are its own to see");
    let found = grids(&[FakeGrid::new(true, false)]);
    assert!(watch(&me, &found, Some((0, 1)), &mut backoff()), "the watch's own finding");
}

/// A worker is moved off a waiting caller's CPU only when every live worker was last seen there.
#[test]
fn a_worker_is_moved_only_when_every_worker_sits_on_the_callers_cpu() {
    assert_eq!(
        worker_to_move([seen(11, 0), seen(12, 0)].into_iter(), 0),
        Some(11),
        "all on the caller's CPU: the first"
    );
    assert_eq!(worker_to_move([seen(11, 0), seen(12, 1)].into_iter(), 0), None, "one elsewhere takes the call");
    assert_eq!(worker_to_move([seen(11, 1), seen(12, 1)].into_iter(), 0), None, "all elsewhere");
    assert_eq!(worker_to_move([seen(11, 0), seen(12, CPU_UNKNOWN)].into_iter(), 0), None, "one not seen yet");
    assert_eq!(worker_to_move([seen(0, 0)].into_iter(), 0), None, "no thread id to move it by");
    assert_eq!(worker_to_move([].into_iter(), 0), None, "no live worker");
}

/// In the latency mode every worker records its thread id at once and, once it yields, its CPU; the default
/// mode's workers record nothing (nothing moves them), and a pool there never moves one.
#[test]
fn latency_mode_workers_record_where_they_run_and_the_default_modes_do_not() {
    for latency_mode in [true, false] {
        let key = PoolKey {
            workers: 2,
            spin_sweeps: 1,
            park_max: Duration::from_millis(1),
            stuck_after: Duration::from_secs(10),
            threads: HostThreads { latency_mode, slice: None },
        };
        let pool = Pool::for_key(key).expect("pool");
        let recorded = || {
            lock(&pool.inner.workers)
                .iter()
                .map(|w| (w.state.tid.load(Ordering::Relaxed), w.state.cpu.load(Ordering::Relaxed)))
                .collect::<Vec<_>>()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        if latency_mode {
            // idle workers yield at once (one spinning sweep): each soon records a CPU
            while recorded().iter().any(|&(tid, cpu)| tid == 0 || cpu == CPU_UNKNOWN) {
                assert!(
                    Instant::now() < deadline,
                    "latency-mode workers never recorded where they run: {:?}",
                    recorded()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        } else {
            std::thread::sleep(Duration::from_millis(20));
            assert!(recorded().iter().all(|&(tid, cpu)| tid == 0 && cpu == CPU_UNKNOWN), "{:?}", recorded());
            assert_eq!(pool.make_room_for_waiter(), None, "the default mode never moves a worker");
            assert!(lock(&pool.inner.last_move).is_none());
        }
    }
}

/// Sets thread `tid`'s affinity to `cpus` (0: the calling thread); false if the system refused.
#[cfg(target_os = "linux")]
fn set_affinity(tid: i32, cpus: &[usize]) -> bool {
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET writes inside it (every CPU is below
    // CPU_SETSIZE: they come from sched_getaffinity); sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The CPUs thread `tid` may run on (0: the calling thread).
#[cfg(target_os = "linux")]
fn affinity(tid: i32) -> Vec<usize> {
    // SAFETY: as in set_affinity; sched_getaffinity writes the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// The trap's placement made on purpose: both latency-mode workers on the waiting thread's CPU (pinned there
/// until they have recorded it, then allowed every CPU again). The waiter's call moves one of them off it,
/// which keeps every CPU it had; a second call within the millisecond moves nothing. On a machine (or a test
/// process) with one CPU there is nowhere to move a worker, and nothing is asserted.
#[cfg(target_os = "linux")]
#[test]
fn a_waiter_moves_one_worker_off_its_cpu_when_both_are_queued_there() {
    let allowed = affinity(0);
    if allowed.len() < 2 {
        return;
    }
    let key = PoolKey {
        workers: 2,
        spin_sweeps: 1,
        park_max: Duration::from_millis(1),
        stuck_after: Duration::from_secs(11), // a pool of its own (the other tests' key has 10 s)
        threads: HostThreads { latency_mode: true, slice: None },
    };
    let pool = Pool::for_key(key).expect("pool");
    let deadline = Instant::now() + Duration::from_secs(30);
    let states: Vec<Arc<WorkerState>> = lock(&pool.inner.workers).iter().map(|w| w.state.clone()).collect();
    while states.iter().any(|s| s.tid.load(Ordering::Relaxed) == 0) {
        assert!(Instant::now() < deadline, "the workers never recorded their thread ids");
        std::thread::sleep(Duration::from_millis(1));
    }
    let tids: Vec<i32> = states.iter().map(|s| s.tid.load(Ordering::Relaxed)).collect();
    // this thread and both workers on one CPU, until each worker has been seen there
    let cpu = allowed[0];
    assert!(set_affinity(0, &[cpu]));
    for &tid in &tids {
        assert!(set_affinity(tid, &[cpu]));
    }
    while states.iter().any(|s| s.cpu.load(Ordering::Relaxed) != cpu as u32) {
        assert!(Instant::now() < deadline, "the pinned workers never recorded their CPU");
        std::thread::sleep(Duration::from_millis(1));
    }
    for &tid in &tids {
        assert!(set_affinity(tid, &allowed));
    }
    let moved = pool.make_room_for_waiter();
    let again = pool.make_room_for_waiter();
    assert!(set_affinity(0, &allowed));
    let moved = moved.expect("both workers were on the waiter's CPU: one is moved");
    assert!(tids.contains(&moved), "a worker of the pool is moved ({moved} not in {tids:?})");
    assert_eq!(affinity(moved), allowed, "the moved worker keeps every CPU it had");
    assert_eq!(again, None, "at most one move a millisecond");
}
