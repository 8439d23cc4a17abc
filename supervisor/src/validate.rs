//! Checks of a supervision spec, whether built in code or loaded from TOML: every problem is reported with
//! its path (`root.children[2].name: ...`), never only the first.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::error::SupervisorError;
use crate::policy::{Placement, Restart, Strategy};
use crate::registry::validate_name;
use crate::services::plural_devices;
use crate::spec::{ChildSpec, ChildStart, SupervisorSpec};

impl SupervisorSpec {
    /// Checks what a spec built in code can get wrong; the TOML loader reports the same errors with paths.
    pub fn validate(&self) -> Result<(), SupervisorError> {
        let mut problems = Vec::new();
        check_tree(self, "supervisor", &mut problems);
        reported(problems)
    }
}

/// `Ok` without problems, else every problem in one [`SupervisorError::InvalidSpec`].
fn reported(problems: Vec<String>) -> Result<(), SupervisorError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SupervisorError::InvalidSpec(problems.join("; ")))
    }
}

impl SupervisorSpec {
    /// Checks that every GPU child pinned to a device (`GpuChild::device`) names one of the `devices`
    /// devices the tree will run on; each one that does not is reported with its path.
    pub fn validate_devices(&self, devices: usize) -> Result<(), SupervisorError> {
        let mut problems = Vec::new();
        check_devices(self, "supervisor", devices, &mut problems);
        reported(problems)
    }
}

impl SupervisorSpec {
    /// Checks that the tree fits devices of `device_slots` slots each (one entry per device): every pinned
    /// device exists ([`SupervisorSpec::validate_devices`]), every pinned slot exists, the children pinned to
    /// a device fit it, and all the GPU children started with the tree fit all the devices together (the
    /// children a `simple_one_for_one` supervisor starts later are not counted). Each problem with its path.
    pub fn validate_capacity(&self, device_slots: &[u32]) -> Result<(), SupervisorError> {
        let mut problems = Vec::new();
        check_devices(self, "supervisor", device_slots.len(), &mut problems);
        check_capacity(self, "supervisor", device_slots, &mut problems);
        reported(problems)
    }
}

/// How many GPU children a tree starts with, in total and per pinned device.
#[derive(Default)]
struct GpuCount {
    total: usize,
    pinned: HashMap<u32, usize>,
}

/// Reports pinned slots past their device's end, and GPU children that cannot all have a slot (see
/// [`SupervisorSpec::validate_capacity`]). Problems are `path: message`.
pub(crate) fn check_capacity(spec: &SupervisorSpec, path: &str, device_slots: &[u32], problems: &mut Vec<String>) {
    let mut count = GpuCount::default();
    count_gpu_children(spec, path, device_slots, &mut count, problems);
    let fix = "give the devices more slots (`DeviceConfig::slots`; the command's `--slots`), run on more devices \
               (`--devices`) or declare fewer GPU children";
    let mut pinned: Vec<_> = count.pinned.iter().collect();
    pinned.sort_unstable();
    for (&device, &n) in pinned {
        if let Some(&slots) = device_slots.get(device as usize) {
            if n > slots as usize {
                problems.push(format!(
                    "{path}: {n} GPU children are pinned to device {device}, which has {slots} slots: {fix}"
                ));
            }
        }
    }
    let all: u64 = device_slots.iter().map(|&s| u64::from(s)).sum();
    if count.total as u64 > all {
        let devices = match device_slots {
            [one] => format!("a device of {one} slots holds {all}"),
            _ => format!("{} devices hold {all} slots", device_slots.len()),
        };
        problems.push(format!("{path}: the tree starts {} GPU children; {devices}: {fix}", count.total));
    }
}

fn count_gpu_children(
    spec: &SupervisorSpec,
    path: &str,
    device_slots: &[u32],
    count: &mut GpuCount,
    problems: &mut Vec<String>,
) {
    if spec.strategy == Strategy::SimpleOneForOne {
        return; // its children are started later, one by one
    }
    for (i, child) in spec.children.iter().enumerate() {
        match &child.start {
            ChildStart::Gpu(g) => {
                count.total += 1;
                let device = match g.wanted_placement() {
                    Placement::Device(d) => {
                        *count.pinned.entry(d).or_default() += 1;
                        Some(d)
                    }
                    _ => None,
                };
                let slots = match device {
                    Some(d) => device_slots.get(d as usize).copied(),
                    None => device_slots.iter().copied().max(),
                };
                if let (Some(slot), Some(slots)) = (g.wanted_slot(), slots) {
                    if slot >= slots {
                        let child_path = ChildPath { parent: path, index: i };
                        problems.push(format!(
                            "{child_path}.slot: slot {slot} does not exist (the device has {slots} slots)"
                        ));
                    }
                }
            }
            ChildStart::Supervisor(nested) => count_gpu_children(
                nested,
                &format!("{}.supervisor", ChildPath { parent: path, index: i }),
                device_slots,
                count,
                problems,
            ),
            ChildStart::Actor(_) => {}
        }
    }
}

/// Reports every GPU child of the tree pinned to a device beyond the first `devices`. Problems are
/// `path: message`.
pub(crate) fn check_devices(spec: &SupervisorSpec, path: &str, devices: usize, problems: &mut Vec<String>) {
    for (i, child) in spec.children.iter().enumerate() {
        match &child.start {
            ChildStart::Gpu(g) => {
                if let Placement::Device(n) = g.wanted_placement() {
                    if n as usize >= devices {
                        let child_path = ChildPath { parent: path, index: i };
                        let why = plural_devices(devices);
                        problems.push(format!("{child_path}.device: device {n} does not exist ({why})"));
                    }
                }
            }
            ChildStart::Supervisor(nested) => check_devices(
                nested,
                &format!("{}.supervisor", ChildPath { parent: path, index: i }),
                devices,
                problems,
            ),
            ChildStart::Actor(_) => {}
        }
    }
}

/// Where a child spec sits in its tree, formatted only when a problem is reported: a tree of 100,000
/// children is checked without building 100,000 path strings.
struct ChildPath<'a> {
    parent: &'a str,
    index: usize,
}

impl fmt::Display for ChildPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.children[{}]", self.parent, self.index)
    }
}

/// Checks a whole tree, including registry names unique across it. Problems are `path: message`.
pub(crate) fn check_tree(spec: &SupervisorSpec, path: &str, problems: &mut Vec<String>) {
    check_spec(spec, path, problems);
    if has_duplicate_name(spec, &mut HashSet::with_capacity(spec.children.len())) {
        let mut names = HashMap::new();
        collect_names(spec, path, &mut names, problems);
    }
}

/// Whether a registry name is given to two children of the tree (the quick pass: the paths of the
/// duplicates are found by [`collect_names`] only when there is one).
fn has_duplicate_name<'a>(spec: &'a SupervisorSpec, seen: &mut HashSet<&'a str>) -> bool {
    spec.children.iter().any(|child| {
        let duplicate = match &child.name {
            Some(name) if spec.strategy != Strategy::SimpleOneForOne => !seen.insert(name.as_str()),
            _ => false,
        };
        duplicate || matches!(&child.start, ChildStart::Supervisor(nested) if has_duplicate_name(nested, seen))
    })
}

fn collect_names(spec: &SupervisorSpec, path: &str, seen: &mut HashMap<String, String>, problems: &mut Vec<String>) {
    for (i, child) in spec.children.iter().enumerate() {
        let child_path = format!("{path}.children[{i}]");
        if let Some(name) = &child.name {
            if spec.strategy != Strategy::SimpleOneForOne {
                if let Some(first) = seen.insert(name.clone(), child_path.clone()) {
                    problems.push(format!("{child_path}.name: \"{name}\" is also the name of {first}"));
                }
            }
        }
        if let ChildStart::Supervisor(nested) = &child.start {
            collect_names(nested, &format!("{child_path}.supervisor"), seen, problems);
        }
    }
}

/// Checks one supervisor level and its children (recursively). Problems are `path: message`.
pub(crate) fn check_spec(spec: &SupervisorSpec, path: &str, problems: &mut Vec<String>) {
    if spec.period.is_zero() {
        problems.push(format!("{path}.period: must be positive"));
    }
    if spec.strategy == Strategy::SimpleOneForOne && spec.children.len() != 1 {
        problems.push(format!(
            "{path}.children: a simple_one_for_one supervisor needs exactly one child (the template), found {}",
            spec.children.len()
        ));
    }
    let mut ids = HashSet::with_capacity(spec.children.len());
    for (i, child) in spec.children.iter().enumerate() {
        let child_path = ChildPath { parent: path, index: i };
        if !ids.insert(child.id.as_str()) {
            problems.push(format!("{child_path}.id: duplicate id \"{}\"", child.id));
        }
        check_child(child, &child_path, problems);
        if let ChildStart::Supervisor(nested) = &child.start {
            check_spec(nested, &format!("{child_path}.supervisor"), problems);
        }
    }
}

/// Checks one child spec. Problems are `path: message`.
pub(crate) fn check_child(child: &ChildSpec, path: &dyn fmt::Display, problems: &mut Vec<String>) {
    if child.id.is_empty() {
        problems.push(format!("{path}.id: must not be empty"));
    }
    if child.significant && child.restart == Restart::Permanent {
        problems.push(format!("{path}.significant: a significant child cannot be permanent"));
    }
    if let Some(name) = &child.name {
        let name = match name.contains("{id}") {
            true => std::borrow::Cow::Owned(name.replace("{id}", "id")),
            false => std::borrow::Cow::Borrowed(name.as_str()),
        };
        if let Err(e) = validate_name(&name) {
            problems.push(format!("{path}.name: {e}"));
        }
    }
    if let Some(b) = &child.backoff {
        if b.initial.is_zero() || b.max < b.initial {
            problems.push(format!("{path}.backoff: needs 0 < initial <= max"));
        }
    }
    if let ChildStart::Gpu(g) = &child.start {
        if g.behaviour().is_empty() {
            problems.push(format!("{path}.gpu: behaviour name must not be empty"));
        }
    }
}
