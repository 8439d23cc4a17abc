//! Behaviours: the device functions an actor runs, registered by name.
//!
//! Six are built in (`echo`, `counter`, `kv`, `test`, and the demo's `sensor` and `alerts`; see
//! `kernels/behaviours/`). Users add their own with the `ringvisor-build` helper, which compiles a `.cu` file
//! for the CPU backend and embeds its source for NVRTC (and a `.wgsl` version, if given, for the wgpu
//! backend), then hands [`UserBehaviour`] values to [`BehaviourSet::register`].

use crate::error::DeviceError;
use crate::ffi::BehaviourFn;
use crate::layout::RV_MAX_BEHAVIOURS;

/// First id given to user behaviours (ids below are reserved for built-ins).
pub const FIRST_USER_BEHAVIOUR: u32 = 16;

/// A behaviour's id on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BehaviourId(pub u32);

/// A user behaviour, as described by the code `ringvisor-build` generates.
#[derive(Clone, Copy, Debug)]
pub struct UserBehaviour {
    /// Registry name (what specs and `Device::create` use).
    pub name: &'static str,
    /// Name of the device function in the `.cu` source.
    pub function: &'static str,
    /// The host build of the function (CPU backend).
    pub host_fn: BehaviourFn,
    /// The `.cu` source, for NVRTC (CUDA backend).
    pub cuda_source: &'static str,
    /// The WGSL version, for the wgpu backend: a file defining `fn <function>() -> i32` (see
    /// `docs/behaviours.md`), declared with `ringvisor_build::Behaviours::wgsl`; empty: none, and creating the
    /// behaviour on the wgpu backend is refused as an unknown behaviour.
    pub wgsl_source: &'static str,
    /// Bytes of state the behaviour needs (`sizeof` its state struct, declared with
    /// `ringvisor_build::Behaviours::state`); 0: not declared. Creating it in a slot whose state region is
    /// smaller fails on the host with [`DeviceError::StateTooSmall`].
    pub state_bytes: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct BehaviourEntry {
    pub name: String,
    pub id: BehaviourId,
    pub host_fn: BehaviourFn,
    pub function: String,
    pub cuda_source: Option<&'static str>,
    /// The user's WGSL version (built-ins: `None`, theirs are the wgpu backend's own).
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))] // read by the wgpu backend only
    pub wgsl_source: Option<&'static str>,
    /// Declared state size (0: not declared).
    pub state_bytes: u32,
}

/// The behaviours a device knows, by name and id.
#[derive(Clone, Debug)]
pub struct BehaviourSet {
    entries: Vec<BehaviourEntry>,
}

/// The built-in behaviours: name, id, device function (in the order and with the ids of `kernels/rv_builtins.h`,
/// the one list; a test checks every table against it).
pub const BUILTIN_BEHAVIOURS: [(&str, u32, &str); 6] = [
    ("echo", 1, "rv_behaviour_echo"),
    ("counter", 2, "rv_behaviour_counter"),
    ("kv", 3, "rv_behaviour_kv"),
    ("test", 4, "rv_behaviour_test"),
    ("sensor", 5, "rv_behaviour_sensor"),
    ("alerts", 6, "rv_behaviour_alerts"),
];

impl Default for BehaviourSet {
    fn default() -> Self {
        Self::builtins()
    }
}

impl BehaviourSet {
    /// The six built-in behaviours.
    pub fn builtins() -> Self {
        let entries = BUILTIN_BEHAVIOURS
            .iter()
            .map(|&(name, id, function)| BehaviourEntry {
                name: name.to_string(),
                id: BehaviourId(id),
                // SAFETY: rv_builtin_behaviour only returns pointers to functions of the linked kernel library.
                host_fn: unsafe { crate::ffi::rv_builtin_behaviour(id) }.expect("built-in behaviour is linked"),
                function: function.to_string(),
                cuda_source: None,
                wgsl_source: None,
                state_bytes: 0,
            })
            .collect();
        Self { entries }
    }

    /// Registers a user behaviour under the next free id. Fails on a duplicate or invalid name, or when all
    /// ids are taken.
    pub fn register(&mut self, behaviour: UserBehaviour) -> Result<BehaviourId, DeviceError> {
        let valid = !behaviour.name.is_empty()
            && behaviour.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !behaviour.function.is_empty()
            && behaviour.function.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(DeviceError::InvalidConfig(format!(
                "behaviour name `{}` / function `{}`: use letters, digits, `_` (and `-` in names)",
                behaviour.name, behaviour.function
            )));
        }
        if self.by_name(behaviour.name).is_some() {
            return Err(DeviceError::InvalidConfig(format!("behaviour `{}` is registered twice", behaviour.name)));
        }
        let next = self.entries.iter().map(|e| e.id.0 + 1).max().unwrap_or(0).max(FIRST_USER_BEHAVIOUR);
        if next >= RV_MAX_BEHAVIOURS {
            return Err(DeviceError::InvalidConfig("no behaviour ids left".into()));
        }
        let id = BehaviourId(next);
        self.entries.push(BehaviourEntry {
            name: behaviour.name.to_string(),
            id,
            host_fn: behaviour.host_fn,
            function: behaviour.function.to_string(),
            cuda_source: Some(behaviour.cuda_source),
            wgsl_source: (!behaviour.wgsl_source.is_empty()).then_some(behaviour.wgsl_source),
            state_bytes: behaviour.state_bytes,
        });
        Ok(id)
    }

    /// Builder form of [`BehaviourSet::register`].
    pub fn with(mut self, behaviour: UserBehaviour) -> Result<Self, DeviceError> {
        self.register(behaviour)?;
        Ok(self)
    }

    /// The id registered under `name`.
    pub fn id(&self, name: &str) -> Option<BehaviourId> {
        self.by_name(name).map(|e| e.id)
    }

    /// The name registered for `id`.
    pub fn name(&self, id: BehaviourId) -> Option<&str> {
        self.entries.iter().find(|e| e.id == id).map(|e| e.name.as_str())
    }

    /// The state size behaviour `id` declared (0: not declared).
    pub fn state_bytes(&self, id: BehaviourId) -> u32 {
        self.entries.iter().find(|e| e.id == id).map_or(0, |e| e.state_bytes)
    }

    /// All registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    fn by_name(&self, name: &str) -> Option<&BehaviourEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    pub(crate) fn entries(&self) -> &[BehaviourEntry] {
        &self.entries
    }

    /// The CPU backend's dispatch table, indexed by id.
    pub(crate) fn host_table(&self) -> Box<[Option<BehaviourFn>]> {
        let mut table = vec![None; RV_MAX_BEHAVIOURS as usize].into_boxed_slice();
        for e in &self.entries {
            table[e.id.0 as usize] = Some(e.host_fn);
        }
        table
    }
}

/// Anything that names a behaviour: a registry name or an id.
pub trait AsBehaviour {
    /// Resolves against `set`.
    fn resolve(&self, set: &BehaviourSet) -> Result<BehaviourId, DeviceError>;
}

impl AsBehaviour for &str {
    fn resolve(&self, set: &BehaviourSet) -> Result<BehaviourId, DeviceError> {
        set.id(self).ok_or_else(|| DeviceError::UnknownBehaviour(format!("`{self}`")))
    }
}

impl AsBehaviour for String {
    fn resolve(&self, set: &BehaviourSet) -> Result<BehaviourId, DeviceError> {
        self.as_str().resolve(set)
    }
}

impl AsBehaviour for BehaviourId {
    fn resolve(&self, set: &BehaviourSet) -> Result<BehaviourId, DeviceError> {
        set.name(*self).map(|_| *self).ok_or_else(|| DeviceError::UnknownBehaviour(format!("id {}", self.0)))
    }
}
