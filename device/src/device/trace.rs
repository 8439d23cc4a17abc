//! A call measured hop by hop ([`Device::trace_call`]): the host stamps when the call began, when its message was
//! published and when the caller had the reply; the device code stamps, for the one message flagged
//! `RV_FLAG_TRACE`, when the actor's step began, read it, ran it and published the reply (`rv_record_trace` in
//! `kernels/protocol/actor.cu`, into the grid header's `trace_ns`). All stamps are host time (ns since the Unix
//! epoch): the device's clock is converted with the offset the backend measured when it started.

use std::time::{Duration, Instant};

use super::Device;
use crate::clock::unix_now_ns;
use crate::error::DeviceError;
use crate::layout::RV_FLAG_TRACE;
use crate::message::Reply;
use crate::shared::SharedGrid;
use crate::sync::lock;

/// How long a traced call waits, after its reply, for the device's last stamp (stored just after the reply).
const STAMPS_WAIT: Duration = Duration::from_millis(100);

thread_local! {
    /// While this thread writes a traced call's message: when the message was published (0 until it is);
    /// `u64::MAX` otherwise.
    static PUBLISHED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

/// Called by the inbox's writer once it published a message, before it tells the executor: stamps the moment if
/// this thread is writing a traced call's message (`inbox.rs`).
pub(super) fn note_published() {
    PUBLISHED_NS.with(|t| {
        if t.get() == 0 {
            t.set(unix_now_ns());
        }
    });
}

/// When the device's actor handled a traced message (host time, ns since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceStamps {
    /// The actor's step that found the message began (after its one read of `host_seq` saw it move).
    pub step_began_ns: u64,
    /// The message was read: the step's control words, then the envelope out of the inbox.
    pub read_ns: u64,
    /// The behaviour returned.
    pub ran_ns: u64,
    /// The reply was published (the outbox tail stored).
    pub published_ns: u64,
}

/// Where the time of one call went ([`Device::trace_call`]). Host stamps are exact; device stamps are exact among
/// themselves, and placed against the host's by the clock offset the backend measured at start (on CUDA within
/// half a PCIe round trip; exact on the CPU backend, which shares the host's clock): of the two crossings
/// ([`CallTrace::hops`]' second and last), each may be off by that much, their sum is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTrace {
    /// The call began (host time, ns since the Unix epoch).
    pub started_ns: u64,
    /// Its message was written and published to the actor (inbox tail and `host_seq` stored), before the executor
    /// was told (the CPU backend's run-set mark, which a worker watching the slot does not wait for).
    pub written_ns: u64,
    /// The device's stamps; `None` where the backend records none (WebGPU: WGSL has no clock).
    pub device: Option<DeviceStamps>,
    /// The caller had the reply.
    pub answered_ns: u64,
}

impl CallTrace {
    /// The call's hops in order, each named, in nanoseconds (signed: a crossing can read slightly negative by the
    /// clock offset's error). Without device stamps: the host's write, then the rest of the round trip.
    pub fn hops(&self) -> Vec<(&'static str, i64)> {
        let d = |a: u64, b: u64| b as i64 - a as i64;
        let mut hops = vec![("host writes the message", d(self.started_ns, self.written_ns))];
        match self.device {
            Some(s) => hops.extend([
                ("to the device: an actor step finds it", d(self.written_ns, s.step_began_ns)),
                ("device reads it (control words, envelope)", d(s.step_began_ns, s.read_ns)),
                ("behaviour runs", d(s.read_ns, s.ran_ns)),
                ("device publishes the reply", d(s.ran_ns, s.published_ns)),
                ("back to the host: the caller has it", d(s.published_ns, self.answered_ns)),
            ]),
            None => hops.push((
                "the device's round trip, and the host finding the reply",
                d(self.written_ns, self.answered_ns),
            )),
        }
        hops
    }

    /// The whole call, in nanoseconds.
    pub fn total_ns(&self) -> u64 {
        self.answered_ns.saturating_sub(self.started_ns)
    }
}

/// The header's `trace_armed` set while a traced call is in flight (cleared when dropped, whatever the call's end).
struct TraceArmed<'a>(&'a SharedGrid);

impl<'a> TraceArmed<'a> {
    fn arm(grid: &'a SharedGrid) -> Self {
        grid.arm_trace(true);
        Self(grid)
    }
}

impl Drop for TraceArmed<'_> {
    fn drop(&mut self) {
        self.0.arm_trace(false);
    }
}

impl Device {
    /// [`Device::call`], measured hop by hop: the reply and a [`CallTrace`]. One traced call at a time per device
    /// (a second waits for the first); other calls and sends go on beside it untraced. For finding where a call's
    /// time goes on a given machine (`ringvisor-bench --only-cuda` prints the breakdown); a traced call costs a
    /// few device clock reads and five stores more than a plain one. Errors as [`Device::call`]'s.
    pub fn trace_call(&self, slot: u32, payload: &[u8], timeout: Duration) -> Result<(Reply, CallTrace), DeviceError> {
        let _one_at_a_time = lock(&self.inner.trace);
        let _armed = TraceArmed::arm(&self.inner.grid);
        let (_, before) = self.inner.grid.trace_record();
        let started_ns = unix_now_ns();
        let written_ns = std::cell::Cell::new(0);
        let reply = self.run_call(slot, timeout, |clock| {
            PUBLISHED_NS.with(|t| t.set(0));
            let started = self.start_call_flagged(slot, payload, RV_FLAG_TRACE as u8, clock);
            // 0: nothing was published (the write failed); the moment it returned stands in
            let published = PUBLISHED_NS.with(|t| t.replace(u64::MAX));
            written_ns.set(if published == 0 { unix_now_ns() } else { published });
            started
        })?;
        let (answered_ns, written_ns) = (unix_now_ns(), written_ns.get());
        let device = self.device_stamps(slot, before[3]);
        Ok((reply, CallTrace { started_ns, written_ns, device, answered_ns }))
    }

    /// The device's stamps of the traced message just answered by `slot`: the record once its last stamp moved
    /// past `previous` (stored just after the reply, so it is waited for briefly).
    fn device_stamps(&self, slot: u32, previous: u64) -> Option<DeviceStamps> {
        if !self.inner.executor.records_traces() {
            return None;
        }
        let until = Instant::now() + STAMPS_WAIT;
        loop {
            let (by, [step_began_ns, read_ns, ran_ns, published_ns]) = self.inner.grid.trace_record();
            if published_ns != previous && by == slot {
                return Some(DeviceStamps { step_began_ns, read_ns, ran_ns, published_ns });
            }
            if Instant::now() >= until {
                return None;
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The publication is stamped only on a thread writing a traced call's message, and only its first write
    /// (a call's message is one write); every other write leaves the stamp alone.
    #[test]
    fn only_a_thread_writing_a_traced_call_stamps_its_publication() {
        note_published();
        assert_eq!(PUBLISHED_NS.with(|t| t.get()), u64::MAX, "not tracing: nothing stamped");
        PUBLISHED_NS.with(|t| t.set(0));
        let before = unix_now_ns();
        note_published();
        let stamped = PUBLISHED_NS.with(|t| t.get());
        assert!(stamped >= before && stamped <= unix_now_ns(), "{before} <= {stamped}");
        note_published();
        assert_eq!(PUBLISHED_NS.with(|t| t.get()), stamped, "the first publication's stamp kept");
        let other = std::thread::spawn(|| {
            note_published();
            PUBLISHED_NS.with(|t| t.get())
        });
        assert_eq!(other.join().unwrap(), u64::MAX, "another thread's writes are not traced");
        PUBLISHED_NS.with(|t| t.set(u64::MAX));
    }
}
