//! OTP's admin API, the supervisor's side (`handle_call` in `supervisor.erl`): start, terminate, restart and
//! delete a child by id, start a dynamic child, and the `which_children` / `count_children` answers. The
//! errors are OTP's (`already_started`, `already_present`, `running`, `restarting`, `not_found`).

use ractor::ActorRef;

use super::client::{ChildCount, ChildInfo, SupervisorMsg};
use super::SupervisorState;
use crate::error::SupervisorError;
use crate::handle::ChildRef;
use crate::policy::{ChildType, Strategy};
use crate::spec::ChildSpec;
use crate::status::Run;
use crate::validate::check_child;

impl SupervisorState {
    /// `handle_start_child`.
    pub(super) async fn admin_start_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        spec: ChildSpec,
    ) -> Result<ChildRef, SupervisorError> {
        self.refuse_simple_one_for_one()?;
        if let Some(idx) = self.find(&spec.id) {
            return Err(match self.children[idx].run {
                Run::Running(_) => SupervisorError::AlreadyStarted(spec.id),
                _ => SupervisorError::AlreadyPresent(spec.id),
            });
        }
        let mut problems = Vec::new();
        check_child(&spec, &"child", &mut problems);
        if !problems.is_empty() {
            return Err(SupervisorError::InvalidSpec(problems.join("; ")));
        }
        self.add_and_start(myself, spec, Vec::new()).await
    }

    /// `start_child` of a `simple_one_for_one` supervisor: a child from the template.
    pub(super) async fn admin_start_dynamic(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        args: Vec<u8>,
    ) -> Result<ChildRef, SupervisorError> {
        let Some(template) = self.template.clone() else {
            return Err(SupervisorError::WrongStrategy(self.strategy.label()));
        };
        self.next_dynamic += 1;
        let mut spec = template;
        spec.id = format!("{}-{}", spec.id, self.next_dynamic);
        spec.name = spec.name.map(|n| n.replace("{id}", &spec.id));
        self.add_and_start(myself, spec, args).await
    }

    async fn add_and_start(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        spec: ChildSpec,
        args: Vec<u8>,
    ) -> Result<ChildRef, SupervisorError> {
        let id = spec.id.clone();
        let child = self.new_child(spec, args)?;
        self.children.push(child);
        let idx = self.children.len() - 1;
        match self.do_start_child(myself, idx).await {
            Ok(()) => {
                self.record_gauges();
                Ok(self.children[idx].handle())
            }
            Err(reason) => {
                self.remove_child(idx);
                Err(SupervisorError::StartFailed { id, reason })
            }
        }
    }

    /// `terminate_child`: a restarting child just stops being restarted.
    pub(super) async fn admin_terminate_child(&mut self, id: &str) -> Result<(), SupervisorError> {
        let idx = self.find(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        self.do_terminate(idx).await;
        self.del_child(idx);
        self.record_gauges();
        Ok(())
    }

    /// `restart_child`: starts a stopped child again.
    pub(super) async fn admin_restart_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        id: &str,
    ) -> Result<ChildRef, SupervisorError> {
        let idx = self.stopped_child(id)?;
        match self.do_start_child(myself, idx).await {
            Ok(()) => {
                self.record_gauges();
                Ok(self.children[idx].handle())
            }
            Err(reason) => Err(SupervisorError::StartFailed { id: id.to_string(), reason }),
        }
    }

    /// `delete_child`: removes a stopped child's spec.
    pub(super) fn admin_delete_child(&mut self, id: &str) -> Result<(), SupervisorError> {
        let idx = self.stopped_child(id)?;
        self.remove_child(idx);
        self.record_gauges();
        Ok(())
    }

    /// The child `id` that `restart_child` / `delete_child` may act on: it exists and is neither running nor
    /// restarting, on a supervisor that is not `simple_one_for_one`.
    fn stopped_child(&self, id: &str) -> Result<usize, SupervisorError> {
        self.refuse_simple_one_for_one()?;
        let idx = self.find(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        match self.children[idx].run {
            Run::Running(_) => Err(SupervisorError::Running(id.to_string())),
            Run::Restarting => Err(SupervisorError::Restarting(id.to_string())),
            Run::Undefined => Ok(idx),
        }
    }

    fn refuse_simple_one_for_one(&self) -> Result<(), SupervisorError> {
        match self.strategy {
            Strategy::SimpleOneForOne => Err(SupervisorError::WrongStrategy(Strategy::SimpleOneForOne.label())),
            _ => Ok(()),
        }
    }

    pub(super) fn which_children(&self) -> Vec<ChildInfo> {
        self.children
            .iter()
            .map(|c| ChildInfo {
                id: c.spec.id.clone(),
                state: c.run.state(),
                child_type: c.spec.child_type(),
                child: c.handle(),
            })
            .collect()
    }

    pub(super) fn count_children(&self) -> ChildCount {
        let supervisors = self.children.iter().filter(|c| c.spec.child_type() == ChildType::Supervisor).count();
        ChildCount {
            specs: self.children.len(),
            active: self.children.iter().filter(|c| c.running().is_some()).count(),
            supervisors,
            workers: self.children.len() - supervisors,
        }
    }
}
