//! The async runtime the benchmark's supervisors and ractor baselines run on.

/// The runtime every scenario's supervisors and ractor baselines run on: two workers, each asking the kernel
/// for the short time slice ringvisor's own threads ask for ([`ringvisor::device::request_thread_slice`]), as
/// `docs/supervision.md` advises for the runtime that runs supervisors (ractor's baselines run on the same
/// threads, so both sides of a row get it).
pub fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            ringvisor::device::request_thread_slice(ringvisor::device::DEFAULT_THREAD_SLICE);
        })
        .enable_all()
        .build()
        .expect("tokio runtime")
}
