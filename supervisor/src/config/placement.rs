//! A GPU child's place among the runtime's devices in TOML: `device = N` (pinned), `placement = "..."` and
//! `failover = true|false`; and the keys only a GPU child may have.

use super::Walker;
use crate::child::GpuChild;
use crate::policy::Placement;

impl Walker<'_> {
    /// Reports the GPU-only keys of a child of another `kind`.
    pub(super) fn gpu_only_keys(&mut self, t: &toml::Table, path: &str, kind: &str) {
        if kind == "gpu" {
            return;
        }
        let keys = ["init", "slot", "device", "placement", "failover"].into_iter().chain(super::mirror::MIRROR_KEYS);
        for key in keys.filter(|k| t.contains_key(*k)) {
            self.err(&format!("{path}.{key}"), format!("only a GPU child has `{key}` (this one is `{kind}`)"));
        }
    }

    /// A GPU child's `device` (pinned), `placement` and `failover` keys, applied to `gpu`.
    pub(super) fn placement(&mut self, t: &toml::Table, path: &str, mut gpu: GpuChild) -> GpuChild {
        if t.contains_key("device") && t.contains_key("placement") {
            self.err(&format!("{path}.placement"), "give `device` (pinned) or `placement`, not both");
        }
        if let Some(n) = self.integer(t, "device", path, 0) {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            match self.loader.devices {
                Some(count) if n as usize >= count => self.err(
                    &format!("{path}.device"),
                    format!("device {n} does not exist ({})", crate::services::plural_devices(count)),
                ),
                _ => gpu = gpu.device(n),
            }
        }
        let placements = [("fewest_in_use", Placement::FewestInUse), ("round_robin", Placement::RoundRobin)];
        if let Some(p) = t.contains_key("placement").then(|| self.choice(t, "placement", path, &placements)).flatten() {
            gpu = gpu.placement(p);
        }
        if let Some(b) = self.boolean(t, "failover", path) {
            gpu = gpu.failover(b);
        }
        gpu
    }
}
