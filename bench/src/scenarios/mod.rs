//! The scenarios: each measures ringvisor end to end through a running kernel (the CPU backend) and its
//! baseline in the same process run, one family per module:
//! `calls` (round trips), `throughput` (one-way sends), `restarts`, `scale` (creating actors, registry lookups) and
//! `trees` (supervised trees at scale). What they share is here.

use std::time::{Duration, Instant};

pub(crate) use crate::runtime::tokio;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

mod calls;
mod restarts;
mod scale;
mod throughput;
mod trees;

pub use calls::*;
pub use restarts::*;
pub use scale::*;
pub use throughput::*;
pub use trees::*;

/// How much to measure.
#[derive(Clone)]
pub struct Scale {
    pub latency_samples: usize,
    pub throughput_messages: u64,
    pub throughput_runs: usize,
    pub restart_samples: usize,
    pub group_samples: usize,
    pub scale_slots: u32,
    /// Supervised tree sizes, increasing (at least two; the growth rows compare the last two).
    pub tree_sizes: Vec<u32>,
}

const T: Duration = Duration::from_secs(10);

fn elapsed_ns(t0: Instant) -> f64 {
    t0.elapsed().as_nanos() as f64
}

// ---------- round trip ----------

/// A ractor actor that answers each message with its value (`u64` for round trips, `Vec<u8>` for large ones).
struct Echo<T>(std::marker::PhantomData<fn() -> T>);
struct EchoMsg<T>(T, RpcReplyPort<T>);

// ringvisor's `cluster` feature (on here) turns on ractor's, under which each message type says it is one.
impl<T: Send + 'static> ractor::Message for EchoMsg<T> {}

/// An [`Echo`] of `u64`s (round trips; also the actor behind registry entries and spawned trees).
const ECHO: Echo<u64> = Echo(std::marker::PhantomData);

impl<T: Send + 'static> Actor for Echo<T> {
    type Msg = EchoMsg<T>;
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<EchoMsg<T>>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
    async fn handle(
        &self,
        _: ActorRef<EchoMsg<T>>,
        EchoMsg(v, reply): EchoMsg<T>,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let _ = reply.send(v);
        Ok(())
    }
}
