//! Declarative supervision specs: load a [`SupervisorSpec`] from TOML and check any spec (built in code or
//! loaded) for mistakes, reporting every problem with its path (`supervisor.children[2].restart: ...`).
//!
//! ```toml
//! [supervisor]
//! strategy = "one_for_one"      # one_for_all, rest_for_one, simple_one_for_one
//! intensity = 3                 # restarts allowed ...
//! period = 5                    # ... within this many seconds
//! auto_shutdown = "never"       # any_significant, all_significant
//! mirrored = true               # GPU children mirrored by ractor actors unless they say (the default: as
//!                               # the supervisor above; at the root, on)
//!
//! [[supervisor.children]]
//! id = "counter"
//! gpu = "counter"               # a GPU child running this behaviour (or `actor = "..."`, or a
//!                               # `[supervisor.children.supervisor]` table for a nested supervisor)
//! init = [{ u32 = 0 }]          # init: bytes, or typed values laid out as a C struct (optional)
//! restart = "permanent"         # transient, temporary
//! shutdown = 5000               # milliseconds, or "brutal_kill", or "infinity"
//! name = "fleet/counters/main"  # registry name (optional)
//! device = 1                    # GPU children: pin to device 1 of the runtime's devices, or
//!                               # placement = "fewest_in_use" (the default) / "round_robin"
//! failover = false              # GPU children: on losing its device, restart on another one
//! mirrored = true               # GPU children: a ractor actor per incarnation (also mirror_registered, mirror_groups)
//!                               # (default: as the supervisor says)
//! backoff = { initial_ms = 10, max_ms = 1000 }   # optional, beyond OTP
//!
//! [[supervisor.children]]       # a template: 50 children, `{i}` = 0 to 49 in their strings
//! count = 50                    # (and `first = 1` to count from 1)
//! id = "limiter-{i}"
//! gpu = "token_bucket"
//! name = "limiter/client-{i}"
//! init = [{ u32 = 10 }, { u32 = "{i}" }, { f64 = 0.5 }]
//! ```
//!
//! `init` items are bytes (`0` to `255`) or one-key tables: `u8` ... `u64`, `i8` ... `i64`, `f32`, `f64`
//! (little-endian, each at a multiple of its size, as in a C struct with those fields in that order),
//! `bytes` (a string or an array of bytes) and `zeros` (that many zero bytes).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ringvisor_device::layout::RV_INIT_BYTES;
use toml::Value;

use crate::child::{ActorFactory, GpuChild};
use crate::policy::{AutoShutdown, Restart, Shutdown, Strategy};
use crate::spec::*;
use crate::validate::{check_capacity, check_tree};

mod backoff;
mod errors;
mod init_values;
mod locate;
mod mirror;
mod placement;
mod suggest;
mod template;

use errors::split_problem;
pub use errors::{SpecError, SpecErrors};
use template::{SourcePaths, INDEX, MAX_COUNT};

/// Loads specs from TOML, resolving behaviour names (GPU children) and actor names (host children).
#[derive(Default)]
pub struct SpecLoader {
    behaviours: Option<BTreeSet<String>>,
    devices: Option<usize>,
    slots: Option<u32>,
    actors: HashMap<String, Arc<dyn ActorFactory>>,
}

impl SpecLoader {
    /// A loader that knows no behaviours and no actors yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The behaviour names GPU children may use (typically `device.behaviours().names()`); without this
    /// call, behaviour names are not checked at load time.
    pub fn behaviours<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.behaviours = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// How many devices the tree will run on: a GPU child pinned to another (`device = N`) is an error at
    /// load time. Without this call, device indices are checked when the runtime starts.
    pub fn devices(mut self, count: usize) -> Self {
        self.devices = Some(count);
        self
    }

    /// Slots of each device the tree will run on: a pinned slot past the end, or more GPU children than the
    /// devices hold, is an error at load time ([`SupervisorSpec::validate_capacity`]; one device unless
    /// [`SpecLoader::devices`] says otherwise). Without this call, they are checked when the runtime starts.
    pub fn slots(mut self, per_device: u32) -> Self {
        self.slots = Some(per_device);
        self
    }

    /// Makes `actor = "<name>"` start host actors with `factory`.
    pub fn actor(mut self, name: impl Into<String>, factory: impl ActorFactory) -> Self {
        self.actors.insert(name.into(), Arc::new(factory));
        self
    }

    /// Reads and loads a TOML file; its errors name the file.
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<SupervisorSpec, SpecErrors> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            SpecErrors(vec![SpecError { file: Some(file.clone()), ..SpecError::new("", format!("cannot read: {e}")) }])
        })?;
        self.load_str(&text).map_err(|SpecErrors(errors)| {
            SpecErrors(errors.into_iter().map(|e| SpecError { file: Some(file.clone()), ..e }).collect())
        })
    }

    /// Loads a TOML document whose `[supervisor]` table is the root supervisor. Every problem is reported at
    /// once, each with its path, line and column.
    pub fn load_str(&self, text: &str) -> Result<SupervisorSpec, SpecErrors> {
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let message = format!("invalid TOML: {}", e.message().trim_end());
            let line_col = e.span().map(|s| locate::line_col(text, s.start));
            SpecErrors(vec![SpecError { line_col, ..SpecError::new("", message) }])
        })?;
        let mut w = Walker { loader: self, errors: Vec::new(), sources: SourcePaths::default() };
        for key in doc.keys().filter(|k| *k != "supervisor") {
            w.err(key, "unknown top-level key (expected `supervisor`)");
        }
        let spec = match doc.get("supervisor") {
            Some(v) => w.supervisor(v, "supervisor", "supervisor"),
            None => {
                w.err("supervisor", "missing table");
                None
            }
        };
        let mut errors = w.errors;
        if let Some(spec) = &spec {
            let mut problems = Vec::new();
            check_tree(spec, "supervisor", &mut problems);
            if let Some(slots) = self.slots {
                check_capacity(spec, "supervisor", &vec![slots; self.devices.unwrap_or(1)], &mut problems);
            }
            errors.extend(problems.into_iter().map(|p| {
                let SpecError { path, message, .. } = split_problem(p);
                SpecError::new(w.sources.rewrite(&path, "supervisor"), w.sources.rewrite(&message, "supervisor"))
            }));
        }
        let spans = locate::Spans::of(text);
        for e in &mut errors {
            e.line_col = spans.locate(&e.path);
        }
        errors.sort_by_key(|e| e.line_col); // in the file's order (unlocated ones first), as an editor lists them
        match spec {
            Some(spec) if errors.is_empty() => Ok(spec),
            _ => Err(SpecErrors(errors)),
        }
    }
}

/// Stands in for a child that could not be read (the load fails anyway): unique id, nothing to check.
fn placeholder(path: &str) -> ChildSpec {
    never_starts(format!("<invalid {path}>"))
}

/// A child `id` whose every start fails: stands in for one the load reports as unusable (the load fails anyway).
fn never_starts(id: String) -> ChildSpec {
    ChildSpec::actor(id, |_ctx: crate::child::StartContext| async { Err("invalid child spec".to_string()) })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a datetime",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// What a `[[children]]` entry declares.
enum Template {
    /// One child: not a template.
    None,
    /// A template with problems (reported).
    Broken,
    /// A template of one child per index.
    Indices(std::ops::Range<i64>),
}

/// Walks the TOML tree. `path` arguments are where a value is in the TOML (what errors name); `expanded`
/// arguments are where its spec lands once templates are expanded (what validation will name).
struct Walker<'a> {
    loader: &'a SpecLoader,
    errors: Vec<SpecError>,
    sources: SourcePaths,
}

impl Walker<'_> {
    fn err(&mut self, path: &str, message: impl Into<String>) {
        self.errors.push(SpecError::new(path, message));
    }

    fn table<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v toml::Table> {
        match v {
            Value::Table(t) => Some(t),
            other => {
                self.err(path, format!("expected a table, found {}", type_name(other)));
                None
            }
        }
    }

    fn unknown_keys(&mut self, t: &toml::Table, path: &str, known: &[&str]) {
        for key in t.keys().filter(|k| !known.contains(&k.as_str())) {
            let hint = suggest::did_you_mean(key, known.iter().copied());
            self.err(&format!("{path}.{key}"), format!("unknown key ({hint}expected one of: {})", known.join(", ")));
        }
    }

    fn string<'v>(&mut self, t: &'v toml::Table, key: &str, path: &str) -> Option<&'v str> {
        match t.get(key)? {
            Value::String(s) => Some(s),
            other => {
                self.err(&format!("{path}.{key}"), format!("expected a string, found {}", type_name(other)));
                None
            }
        }
    }

    fn boolean(&mut self, t: &toml::Table, key: &str, path: &str) -> Option<bool> {
        match t.get(key)? {
            Value::Boolean(b) => Some(*b),
            other => {
                self.err(&format!("{path}.{key}"), format!("expected a boolean, found {}", type_name(other)));
                None
            }
        }
    }

    fn choice<T: Copy>(&mut self, t: &toml::Table, key: &str, path: &str, options: &[(&str, T)]) -> Option<T> {
        let s = self.string(t, key, path)?;
        match options.iter().find(|(name, _)| *name == s) {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                let hint = suggest::did_you_mean(s, names.iter().copied());
                self.err(
                    &format!("{path}.{key}"),
                    format!("unknown value \"{s}\" ({hint}expected one of: {})", names.join(", ")),
                );
                None
            }
        }
    }

    fn integer(&mut self, t: &toml::Table, key: &str, path: &str, min: i64) -> Option<i64> {
        match t.get(key)? {
            Value::Integer(n) if *n >= min => Some(*n),
            Value::Integer(n) => {
                self.err(&format!("{path}.{key}"), format!("must be at least {min}, found {n}"));
                None
            }
            other => {
                self.err(&format!("{path}.{key}"), format!("expected an integer, found {}", type_name(other)));
                None
            }
        }
    }

    fn number(&mut self, t: &toml::Table, key: &str, path: &str) -> Option<f64> {
        match t.get(key)? {
            Value::Integer(n) => Some(*n as f64),
            Value::Float(x) => Some(*x),
            other => {
                self.err(&format!("{path}.{key}"), format!("expected a number, found {}", type_name(other)));
                None
            }
        }
    }

    fn supervisor(&mut self, v: &Value, path: &str, expanded: &str) -> Option<SupervisorSpec> {
        let t = self.table(v, path)?;
        self.unknown_keys(t, path, &["strategy", "intensity", "period", "auto_shutdown", "mirrored", "children"]);
        let strategy = if t.contains_key("strategy") {
            self.choice(
                t,
                "strategy",
                path,
                &[
                    ("one_for_one", Strategy::OneForOne),
                    ("one_for_all", Strategy::OneForAll),
                    ("rest_for_one", Strategy::RestForOne),
                    ("simple_one_for_one", Strategy::SimpleOneForOne),
                ],
            )
        } else {
            Some(Strategy::OneForOne)
        };
        let mut spec = SupervisorSpec::new(strategy.unwrap_or(Strategy::OneForOne));
        if t.contains_key("intensity") {
            if let Some(n) = self.integer(t, "intensity", path, 0) {
                spec.intensity = u32::try_from(n).unwrap_or(u32::MAX);
            }
        }
        if t.contains_key("period") {
            match self.number(t, "period", path) {
                Some(p) if p > 0.0 && p.is_finite() && Duration::try_from_secs_f64(p).is_ok() => {
                    spec.period = Duration::from_secs_f64(p)
                }
                Some(p) => {
                    self.err(&format!("{path}.period"), format!("must be a positive number of seconds, found {p}"))
                }
                None => {}
            }
        }
        if t.contains_key("auto_shutdown") {
            if let Some(a) = self.choice(
                t,
                "auto_shutdown",
                path,
                &[
                    ("never", AutoShutdown::Never),
                    ("any_significant", AutoShutdown::AnySignificant),
                    ("all_significant", AutoShutdown::AllSignificant),
                ],
            ) {
                spec.auto_shutdown = a;
            }
        }
        spec.mirrored = self.boolean(t, "mirrored", path);
        match t.get("children") {
            None => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.children_of_entry(item, &format!("{path}.children[{i}]"), expanded, &mut spec.children);
                }
            }
            Some(other) => self
                .err(&format!("{path}.children"), format!("expected an array of tables, found {}", type_name(other))),
        }
        let _ = strategy; // an unknown strategy is reported; checking goes on with one_for_one
        Some(spec)
    }

    /// Appends the children one `[[children]]` entry declares: itself, or each instance of a template.
    fn children_of_entry(&mut self, item: &Value, path: &str, parent: &str, children: &mut Vec<ChildSpec>) {
        let mut push = |w: &mut Self, value: &Value, source: &str| {
            let expanded = format!("{parent}.children[{}]", children.len());
            w.sources.record(&expanded, source);
            // An unusable child keeps its place (as a placeholder) so later paths stay right.
            let child = w.child(value, source, &expanded);
            let ok = child.is_some();
            children.push(child.unwrap_or_else(|| placeholder(source)));
            ok
        };
        let indices = match self.template(item, path) {
            Template::None => {
                push(self, item, path);
                return;
            }
            // Loaded once, as its first child would be, so its other problems are reported too.
            Template::Broken => {
                push(self, &template::instance(item, 0), path);
                return;
            }
            Template::Indices(indices) => indices,
        };
        for i in indices {
            let errors = self.errors.len();
            let ok = push(self, &template::instance(item, i), &format!("{path}[i={i}]"));
            if !ok || self.errors.len() > errors {
                return; // the other instances would repeat the same problems
            }
        }
    }

    /// Whether an entry is a template, and which indices it declares (its problems reported).
    fn template(&mut self, item: &Value, path: &str) -> Template {
        let Some(t) = item.as_table() else { return Template::None };
        if !t.contains_key("count") {
            if t.contains_key("first") {
                self.err(&format!("{path}.first"), "`first` belongs to a template: add `count`");
            }
            return Template::None;
        }
        let errors = self.errors.len();
        let count = self.integer(t, "count", path, 1).unwrap_or(0);
        let first = if t.contains_key("first") { self.integer(t, "first", path, 0).unwrap_or(0) } else { 0 };
        if count > MAX_COUNT {
            self.err(&format!("{path}.count"), format!("at most {MAX_COUNT} children per template, found {count}"));
        }
        if count > 1 {
            for key in ["id", "name"] {
                // a string with a placeholder of another name (`{j}`) is reported as that, by `child`
                let lacks_index = |s: &str| !s.contains(INDEX) && !s.contains('{');
                if t.get(key).and_then(Value::as_str).is_some_and(lacks_index) {
                    self.err(
                        &format!("{path}.{key}"),
                        format!("a template of {count} children needs `{INDEX}` in its {key} (each must differ)"),
                    );
                }
            }
            if t.contains_key("slot") {
                self.err(&format!("{path}.slot"), "a template of several children cannot pin them all to one slot");
            }
        }
        if self.errors.len() > errors {
            return Template::Broken;
        }
        Template::Indices(first..first + count)
    }

    fn child(&mut self, v: &Value, path: &str, expanded: &str) -> Option<ChildSpec> {
        let t = self.table(v, path)?;
        self.unknown_keys(
            t,
            path,
            &[
                "id",
                "gpu",
                "actor",
                "supervisor",
                "init",
                "slot",
                "device",
                "placement",
                "failover",
                "mirrored",
                "mirror_registered",
                "mirror_groups",
                "restart",
                "shutdown",
                "significant",
                "name",
                "backoff",
                "count",
                "first",
            ],
        );
        for key in ["id", "name"] {
            let Some(text) = t.get(key).and_then(Value::as_str) else { continue };
            if text.contains(INDEX) {
                self.err(&format!("{path}.{key}"), format!("`{INDEX}` outside a template (add `count = N`)"));
            }
            let allowed: &[&str] = if key == "name" { &[INDEX, "{id}"] } else { &[INDEX] };
            for unknown in template::unknown_placeholders(text, allowed) {
                self.err(
                    &format!("{path}.{key}"),
                    format!(
                        "unknown placeholder `{unknown}` (a template of `count` children replaces `{INDEX}`; a \
                         simple_one_for_one child's name may use `{{id}}`)"
                    ),
                );
            }
        }
        let id = match self.string(t, "id", path) {
            Some(id) => id.to_string(),
            None => {
                if !t.contains_key("id") {
                    self.err(&format!("{path}.id"), "missing");
                }
                return None;
            }
        };
        let kinds: Vec<&str> = ["gpu", "actor", "supervisor"].into_iter().filter(|k| t.contains_key(*k)).collect();
        if kinds.len() != 1 {
            self.err(path, format!("needs exactly one of `gpu`, `actor`, `supervisor` (found {})", kinds.len()));
            return None;
        }
        self.gpu_only_keys(t, path, kinds[0]);
        let mut spec = match kinds[0] {
            "gpu" => {
                let behaviour = self.string(t, "gpu", path)?;
                if let Some(known) = &self.loader.behaviours {
                    if !known.contains(behaviour) {
                        let names: Vec<&str> = known.iter().map(String::as_str).collect();
                        let hint = suggest::did_you_mean(behaviour, names.iter().copied());
                        self.err(
                            &format!("{path}.gpu"),
                            format!("unknown behaviour \"{behaviour}\" ({hint}known: {})", names.join(", ")),
                        );
                    }
                }
                // A bad init or slot is reported and the child kept, so its id and name are checked too.
                let mut gpu = GpuChild::new(behaviour);
                if let Some(init) = t.get("init").and_then(|init| self.init(init, &format!("{path}.init"))) {
                    gpu = gpu.init(init);
                }
                if let Some(slot) = t.contains_key("slot").then(|| self.integer(t, "slot", path, 0)).flatten() {
                    gpu = gpu.slot(u32::try_from(slot).unwrap_or(u32::MAX));
                }
                let gpu = self.placement(t, path, gpu);
                ChildSpec::gpu(id, self.mirror(t, path, gpu))
            }
            "actor" => {
                let name = self.string(t, "actor", path)?;
                match self.loader.actors.get(name) {
                    Some(f) => {
                        let mut spec = never_starts(id);
                        spec.start = ChildStart::Actor(f.clone());
                        spec
                    }
                    None => {
                        let mut names: Vec<&str> = self.loader.actors.keys().map(String::as_str).collect();
                        names.sort_unstable();
                        let hint = suggest::did_you_mean(name, names.iter().copied());
                        self.err(
                            &format!("{path}.actor"),
                            format!("unknown actor \"{name}\" ({hint}known: {})", names.join(", ")),
                        );
                        never_starts(id) // kept under its id, so its id and name are checked too
                    }
                }
            }
            _ => {
                let nested = self.supervisor(
                    &t["supervisor"],
                    &format!("{path}.supervisor"),
                    &format!("{expanded}.supervisor"),
                )?;
                ChildSpec::supervisor(id, nested)
            }
        };
        if t.contains_key("restart") {
            let restarts = [
                ("permanent", Restart::Permanent),
                ("transient", Restart::Transient),
                ("temporary", Restart::Temporary),
            ];
            if let Some(r) = self.choice(t, "restart", path, &restarts) {
                spec.restart = r;
            }
        }
        if let Some(v) = t.get("shutdown") {
            spec.shutdown = match v {
                Value::Integer(ms) if *ms >= 0 => Shutdown::Timeout(Duration::from_millis(*ms as u64)),
                Value::String(s) if s == "brutal_kill" => Shutdown::BrutalKill,
                Value::String(s) if s == "infinity" => Shutdown::Infinity,
                other => {
                    let shown = match other {
                        Value::String(s) => format!("\"{s}\""),
                        v => v.to_string(),
                    };
                    self.err(
                        &format!("{path}.shutdown"),
                        format!("unknown value {shown} (expected milliseconds, \"brutal_kill\" or \"infinity\")"),
                    );
                    spec.shutdown
                }
            };
        }
        if let Some(b) = self.boolean(t, "significant", path) {
            spec.significant = b;
        }
        if t.contains_key("name") {
            spec.name = self.string(t, "name", path).map(str::to_string);
        }
        if let Some(v) = t.get("backoff") {
            spec.backoff = self.backoff(v, &format!("{path}.backoff"));
        }
        Some(spec)
    }

    fn init(&mut self, v: &Value, path: &str) -> Option<Vec<u8>> {
        match init_values::encode(v) {
            Ok(bytes) if bytes.len() <= RV_INIT_BYTES as usize => Some(bytes),
            Ok(bytes) => {
                self.err(path, format!("{} bytes, the most a create carries is {RV_INIT_BYTES}", bytes.len()));
                None
            }
            Err(errors) => {
                for (at, message) in errors {
                    self.err(&format!("{path}{at}"), message);
                }
                None
            }
        }
    }
}
