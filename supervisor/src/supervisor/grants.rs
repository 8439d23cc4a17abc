//! Restart grants (beyond OTP, invisible in its traces): a supervisor lets block 0 restart a failed GPU child
//! in place at once, so the restart costs no round trip to the host and back. The supervisor stays the
//! decider. A child holds a grant only while its restart after a failure is certain to be allowed:
//! - the strategy is one_for_one or simple_one_for_one (no sibling is touched);
//! - its restart type restarts it after an abnormal exit (permanent or transient), with no backoff;
//! - every start hands it the same init bytes (the device repeats the start);
//! - the grants outstanding never exceed the restarts the intensity window still allows.
//!
//! Every restart block 0 carries out is accounted as OTP accounts any: the failure reaches the supervisor as
//! the child's exit, the restart is counted in the intensity window, reported, and the next incarnation's
//! start takes over the restarted device actor instead of asking for one (`gpu/incarnation.rs`). A grant is
//! withdrawn before the child is stopped, and whenever the budget shrinks below the grants held; one the
//! device used before it saw the withdrawal only ever restarts a child the budget allowed when it was given.
//! Budget that frees up as the window slides is handed out at the supervisor's next message.

use std::time::Instant;

use super::children::Child;
use super::SupervisorState;
use crate::policy::{Restart, Strategy};
use crate::spec::ChildStart;
use crate::status::Incarnation;

impl Child {
    /// The child could hold a grant (everything but the budget).
    fn may_hold_grant(&self) -> bool {
        let ChildStart::Gpu(gpu) = &self.spec.start else { return false };
        self.running().is_some()
            && matches!(self.spec.restart, Restart::Permanent | Restart::Transient)
            && self.spec.backoff.is_none()
            && gpu.same_init_every_start(&self.args)
    }

    /// Gives or withdraws the running incarnation's grant. The grant names the incarnation this supervisor
    /// runs, never a newer one block 0 may have started meanwhile (see `Device::set_restart_grant_for`).
    fn set_grant(&mut self, granted: bool) {
        if self.granted == granted {
            return;
        }
        let generation = match self.running() {
            Some(Incarnation::Gpu(generation)) if granted => *generation,
            _ => 0,
        };
        if let Some(gpu) = &self.shared.gpu_actor {
            if gpu.device().set_restart_grant_for(gpu.slot(), generation).is_ok() {
                self.granted = granted;
            }
        }
    }

    /// Withdraws the grant (the child is being stopped).
    pub(super) fn revoke_grant(&mut self) {
        self.set_grant(false);
    }
}

impl SupervisorState {
    /// Brings the grants in line with the rules above: the first children in start order that may hold one
    /// get one, as far as the intensity budget reaches; the others hold none.
    pub(super) fn refresh_grants(&mut self) {
        let strategy_allows = matches!(self.strategy, Strategy::OneForOne | Strategy::SimpleOneForOne);
        let mut budget = if strategy_allows && !self.stopping { self.intensity.remaining(Instant::now()) } else { 0 };
        for child in &mut self.children {
            let grant = budget > 0 && child.may_hold_grant();
            if grant {
                budget -= 1;
            }
            child.set_grant(grant);
        }
    }
}
