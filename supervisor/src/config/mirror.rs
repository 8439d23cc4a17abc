//! A GPU child's mirror in TOML (`GpuChild::mirrored`): `mirrored = true|false`, `mirror_registered = true`
//! (implies `mirrored`) and `mirror_groups = ["group", ...]` (implies `mirrored`). (A supervisor's
//! `mirrored = true|false`, the default of its children, is read with its other keys.)

use toml::Value;

use super::{type_name, Walker};
use crate::child::GpuChild;

/// The keys of a GPU child's mirror.
pub(super) const MIRROR_KEYS: [&str; 3] = ["mirrored", "mirror_registered", "mirror_groups"];

impl Walker<'_> {
    /// A GPU child's mirror keys, applied to `gpu`.
    pub(super) fn mirror(&mut self, t: &toml::Table, path: &str, mut gpu: GpuChild) -> GpuChild {
        if let Some(on) = self.boolean(t, "mirrored", path) {
            gpu = gpu.mirrored(on);
        }
        if self.boolean(t, "mirror_registered", path) == Some(true) {
            gpu = gpu.mirror_registered();
        }
        match t.get("mirror_groups") {
            None => {}
            Some(Value::Array(groups)) => {
                for (i, group) in groups.iter().enumerate() {
                    match group.as_str() {
                        Some(name) if !name.is_empty() => gpu = gpu.mirror_group(name),
                        _ => self.err(&format!("{path}.mirror_groups[{i}]"), "expected a group name (a string)"),
                    }
                }
            }
            Some(other) => self.err(
                &format!("{path}.mirror_groups"),
                format!("expected an array of group names, found {}", type_name(other)),
            ),
        }
        if t.get("mirrored") == Some(&Value::Boolean(false)) && gpu.is_mirrored() == Some(true) {
            self.err(
                &format!("{path}.mirrored"),
                "false, but `mirror_registered` or `mirror_groups` asks for a mirror",
            );
        }
        gpu
    }
}
