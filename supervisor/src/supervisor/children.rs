//! The supervisor's child table: one record per child spec, in start order (ractor keeps children in a hash
//! map; OTP's start order and reverse-order shutdown need this list). A record's run state and what its
//! handles see change together, through [`Child::set_run`].

use std::sync::Arc;
use std::time::Instant;

use super::SupervisorState;
use crate::error::SupervisorError;
use crate::gpu::{self, PreparedStart};
use crate::handle::{ChildRef, ChildShared};
use crate::registry::RegistryError;
use crate::slots::SlotNotice;
use crate::spec::{ChildSpec, ChildStart};
use crate::status::{ChildStatus, Incarnation, Run, RunState};

/// One child: its spec, its current incarnation, and the state its handles share.
pub(super) struct Child {
    pub(super) spec: ChildSpec,
    pub(super) run: Run,
    pub(super) shared: Arc<ChildShared>,
    /// Start attempts so far (the first start is attempt 1).
    pub(super) attempts: u32,
    /// Arguments of a dynamic start.
    pub(super) args: Vec<u8>,
    pub(super) started_at: Option<Instant>,
    /// Consecutive restarts, for backoff.
    pub(super) consecutive: u32,
    /// A GPU child's next start, already submitted to the device (a pipelined group start).
    pub(super) prepared: Option<PreparedStart>,
    /// The running incarnation holds a restart grant (see `grants.rs`).
    pub(super) granted: bool,
}

impl Child {
    pub(super) fn running(&self) -> Option<&Incarnation> {
        self.run.incarnation()
    }

    /// Whether the running incarnation is the GPU one with `generation` in `slot`.
    pub(super) fn runs_gpu_incarnation(&self, notice: &SlotNotice) -> bool {
        matches!(self.run, Run::Running(Incarnation::Gpu(g)) if g == notice.generation)
            && self.shared.gpu_actor.as_ref().is_some_and(|gpu| gpu.is_at(notice.device, notice.slot))
    }

    pub(super) fn handle(&self) -> ChildRef {
        ChildRef { shared: self.shared.clone() }
    }

    /// Moves the child to `run` and its handles to `status`, together: a running child's handles see it
    /// `Running` (and get the messages parked meanwhile); otherwise they see `status` (`Restarting` keeps
    /// parked messages for the next incarnation, `Stopped` and `Gone` make them dead letters).
    pub(super) fn set_run(&mut self, run: Run, status: ChildStatus) {
        match &run {
            Run::Running(incarnation) => {
                debug_assert_eq!(status, ChildStatus::Running);
                self.shared.set_running(incarnation);
            }
            Run::Restarting | Run::Undefined => self.shared.set_down(status),
        }
        self.run = run;
    }

    /// Takes the running incarnation out of the record (it is being stopped, or has exited): the supervisor
    /// stops listening to a GPU one. What the handles see is set by the decision that follows.
    pub(super) fn take_running(&mut self) -> Option<Incarnation> {
        match std::mem::replace(&mut self.run, Run::Undefined) {
            Run::Running(incarnation) => {
                if let (Incarnation::Gpu(generation), Some(gpu)) = (&incarnation, &self.shared.gpu_actor) {
                    gpu::forget(gpu, *generation);
                }
                Some(incarnation)
            }
            _ => None,
        }
    }
}

impl SupervisorState {
    pub(super) fn find(&self, id: &str) -> Option<usize> {
        self.children.iter().position(|c| c.spec.id == id)
    }

    /// A child record for `spec`, with its slot taken for a GPU child.
    pub(super) fn new_child(&self, spec: ChildSpec, args: Vec<u8>) -> Result<Child, SupervisorError> {
        let target = spec.name.clone().unwrap_or_else(|| spec.id.clone());
        let slot = match &spec.start {
            ChildStart::Gpu(g) => Some(gpu::claim_slot(&self.services, &spec.id, g, target)?),
            _ => None,
        };
        if let Some(name) = spec.name.as_ref().filter(|n| self.services.registry().lookup(n).is_some()) {
            if let Some((slots, slot)) = &slot {
                gpu::release_slot(slots, *slot);
            }
            return Err(RegistryError::Taken(name.clone()).into());
        }
        let gpu = slot.map(|(slots, slot)| (slots, slot, self.services.dead_letters().clone()));
        let shared = ChildShared::new(spec.id.clone(), spec.name.clone(), gpu);
        Ok(Child {
            spec,
            run: Run::Undefined,
            shared,
            attempts: 0,
            args,
            started_at: None,
            consecutive: 0,
            prepared: None,
            granted: false,
        })
    }

    /// Drops a child's spec for good: handles see `Gone`, its name and slot are released.
    pub(super) fn retire(&self, child: Child) {
        self.retire_keeping_slot(child, false);
    }

    /// [`Self::retire`]; with `slot_taken_over`, the child's slot is settled and given back by someone else (see
    /// `gpu::abandon`).
    pub(super) fn retire_keeping_slot(&self, mut child: Child, slot_taken_over: bool) {
        child.set_run(Run::Undefined, ChildStatus::Gone);
        if let Some(name) = &child.spec.name {
            self.services.registry().unbind(name, &child.handle());
        }
        if let Some(gpu) = child.shared.gpu_actor.as_ref().filter(|_| !slot_taken_over) {
            gpu::retire(gpu, true);
        }
    }

    pub(super) fn remove_child(&mut self, idx: usize) {
        let child = self.children.remove(idx);
        self.retire(child);
    }

    /// The `ringvisor_children` gauges: children per run state.
    pub(super) fn record_gauges(&self) {
        let mut counts = [0usize; 3];
        for c in &self.children {
            counts[c.run.state() as usize] += 1;
        }
        for (state, n) in [RunState::Running, RunState::Restarting, RunState::Undefined].iter().zip(counts) {
            metrics::gauge!("ringvisor_children", "supervisor" => self.id.clone(), "state" => state.label())
                .set(n as f64);
        }
    }

    /// Submits the device commands of the run of GPU children that starts at `from` (see
    /// [`Self::start_children`]); returns the index after the run (`from + 1` if `from` is not a GPU child).
    pub(super) fn prepare_gpu_starts(&mut self, from: usize) -> usize {
        let mut idx = from;
        while let Some(child) = self.children.get_mut(idx) {
            let ChildStart::Gpu(g) = &child.spec.start else { break };
            if child.prepared.is_none() && child.running().is_none() {
                let init = g.init_for(child.attempts + 1, &child.args);
                child.prepared = gpu::prepare(&child.shared, g, init);
            }
            idx += 1;
        }
        idx.max(from + 1)
    }

    /// Takes back the starts [`Self::prepare_gpu_starts`] submitted for `range` that were not used. Their outcomes
    /// are waited for together, so a device slow to answer costs one start timeout, not one per child (a
    /// one_for_all group of 40 once spent 35 s here, its children's exits unheard meanwhile).
    pub(super) async fn cancel_prepared_starts(&mut self, range: std::ops::Range<usize>) {
        let mut cancels = tokio::task::JoinSet::new();
        for idx in range {
            let child = &mut self.children[idx];
            if let (Some(prepared), ChildStart::Gpu(g)) = (child.prepared.take(), &child.spec.start) {
                let (shared, timeout) = (child.shared.clone(), g.timeout());
                cancels.spawn(async move { gpu::cancel_prepared(&shared, prepared, timeout).await });
            }
        }
        while cancels.join_next().await.is_some() {}
    }
}
