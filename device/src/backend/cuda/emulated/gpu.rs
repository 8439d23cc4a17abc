//! The emulated GPU's properties: what the backend sees of it, and the cost model of its mapped memory.

use std::time::Duration;

/// The emulated GPU's properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulatedGpu {
    /// The name the backend reports.
    pub name: String,
    /// Compute capability.
    pub arch: (u32, u32),
    /// Multiprocessors.
    pub sms: u32,
    /// Resident blocks per multiprocessor (what the occupancy query answers).
    pub blocks_per_sm: u32,
    /// The driver kills kernels after [`EXEC_TIMEOUT`](super::EXEC_TIMEOUT) (a display GPU).
    pub exec_timeout: bool,
    /// Newest PTX ISA version the driver's JIT accepts.
    pub max_ptx_version: (u32, u32),
    /// The cost model of mapped memory: every system-scope load of a kernel thread (a read of the shared region,
    /// a PCIe round trip on a GPU) and every system-scope release store (which waits for the thread's earlier
    /// stores to reach the host) waits this long; a relaxed store is posted and costs nothing, as on a GPU (an
    /// H100 published a reply, ten stores two of them releases, in 1.9 µs: `docs/benchmarks.md`). The default,
    /// 0.9 µs, is half the round trip of a flag ping-ponged through mapped memory between the host and one GPU
    /// thread on an H200 (1.75 µs).
    pub mapped_latency: Duration,
    /// The cost model's price of each further read in a batch of mapped-memory reads issued together (the actor
    /// step's control words): the first waits [`mapped_latency`](Self::mapped_latency), each other this long. A
    /// GPU's small reads of mapped memory share one budget, so a read issued beside others still waits its turn:
    /// an H200 serves about 2.2 million a second, and its step read three words and an envelope in 6.2 µs with
    /// volatile loads, 3.8 µs with three of the envelope's eight (`docs/benchmarks.md`, "On an NVIDIA H200,
    /// 2026-11-27"). The default, 0.45 µs, is that budget's share of one read.
    pub mapped_read_cost: Duration,
}

/// The default [`EmulatedGpu::mapped_latency`].
pub const DEFAULT_MAPPED_LATENCY: Duration = Duration::from_nanos(900);
/// The default [`EmulatedGpu::mapped_read_cost`].
pub const DEFAULT_MAPPED_READ_COST: Duration = Duration::from_nanos(450);

impl Default for EmulatedGpu {
    /// An sm_80 GPU with 2 multiprocessors of 4 resident blocks each (8 blocks: small enough for a 2-core CI
    /// machine, large enough for two devices), a CUDA 12.4 driver's JIT (PTX 8.4).
    fn default() -> Self {
        Self {
            name: "emulated GPU".into(),
            arch: (8, 0),
            sms: 2,
            blocks_per_sm: 4,
            exec_timeout: false,
            max_ptx_version: (8, 4),
            mapped_latency: DEFAULT_MAPPED_LATENCY,
            mapped_read_cost: DEFAULT_MAPPED_READ_COST,
        }
    }
}
