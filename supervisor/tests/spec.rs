//! Declarative specs: TOML loading, the builder, and validation reporting every error with its path.

use std::time::Duration;

use ringvisor_supervisor::*;

const BEHAVIOURS: [&str; 4] = ["echo", "counter", "kv", "test"];

fn loader() -> SpecLoader {
    SpecLoader::new().behaviours(BEHAVIOURS)
}

/// Each error as `path: message` (its line and column are checked by the tests of locations).
fn errors(toml: &str) -> Vec<String> {
    located(toml)
        .iter()
        .map(|e| if e.path.is_empty() { e.message.clone() } else { format!("{}: {}", e.path, e.message) })
        .collect()
}

fn located(toml: &str) -> Vec<SpecError> {
    match loader().load_str(toml) {
        Ok(spec) => panic!("expected errors, loaded {}", spec.outline()),
        Err(SpecErrors(errs)) => errs,
    }
}

fn has(errs: &[String], want: &str) {
    assert!(errs.iter().any(|e| e == want), "missing `{want}` in:\n{}", errs.join("\n"));
}

#[test]
fn the_example_file_loads_as_the_tree_the_builder_makes() {
    let text = include_str!("../../examples/fleet.toml");
    let spec = loader().load_str(text).expect("the example spec is valid");
    let sensors = SupervisorSpec::new(Strategy::RestForOne).intensity(3, Duration::from_secs(5));
    let sensors = (1..=3).fold(sensors, |s, n| {
        s.child(ChildSpec::gpu(format!("s{n}"), GpuChild::new("echo")).name(format!("fleet/sensors/s{n}")))
    });
    let built = SupervisorSpec::new(Strategy::OneForOne)
        .intensity(5, Duration::from_secs(10))
        .child(ChildSpec::gpu("totals", GpuChild::new("counter")).name("fleet/totals"))
        .child(ChildSpec::supervisor("sensors", sensors).name("fleet/sensors"))
        .child(
            ChildSpec::gpu("cache", GpuChild::new("kv"))
                .name("fleet/cache")
                .restart(Restart::Transient)
                .shutdown(Shutdown::Timeout(Duration::from_secs(2)))
                .backoff(Backoff::exponential(Duration::from_millis(10), Duration::from_secs(1))),
        );
    assert_eq!(spec.outline(), built.outline());
}

#[test]
fn defaults_are_otp_s() {
    let spec = loader().load_str("[supervisor]\n[[supervisor.children]]\nid = \"a\"\ngpu = \"echo\"\n").unwrap();
    assert_eq!((spec.strategy, spec.intensity, spec.period), (Strategy::OneForOne, 1, Duration::from_secs(5)));
    assert_eq!(spec.auto_shutdown, AutoShutdown::Never);
    let a = &spec.children[0];
    assert_eq!(
        (a.restart, a.shutdown, a.significant),
        (Restart::Permanent, Shutdown::Timeout(Duration::from_secs(5)), false)
    );
    let nested = loader()
        .load_str("[supervisor]\n[[supervisor.children]]\nid = \"s\"\n[supervisor.children.supervisor]\n")
        .unwrap();
    assert_eq!(nested.children[0].shutdown, Shutdown::Infinity, "supervisors default to infinity");
    assert_eq!(nested.children[0].child_type(), ChildType::Supervisor);
}

#[test]
fn every_error_is_reported_with_its_path() {
    let errs = errors(
        r#"
[supervisor]
strategy = "one_for_some"
intensity = -1
period = 0
colour = "blue"

[[supervisor.children]]
id = "a"
gpu = "counter"
restart = "sometimes"
shutdown = "later"

[[supervisor.children]]
id = "a"
gpu = "nosuch"

[[supervisor.children]]
id = "p"
gpu = "counter"
significant = true
name = "x/y"

[[supervisor.children]]
id = "q"
gpu = "counter"
name = "x/y"

[[supervisor.children]]
id = "both"
gpu = "counter"
actor = "cache"

[[supervisor.children]]
id = "n"
gpu = "kv"
name = "bad//name"
backoff = { initial_ms = 0, max_ms = 10 }
"#,
    );
    has(
        &errs,
        r#"supervisor.strategy: unknown value "one_for_some" (did you mean "one_for_one"? expected one of: one_for_one, one_for_all, rest_for_one, simple_one_for_one)"#,
    );
    has(&errs, "supervisor.intensity: must be at least 0, found -1");
    has(&errs, "supervisor.period: must be a positive number of seconds, found 0");
    has(
        &errs,
        "supervisor.colour: unknown key (expected one of: strategy, intensity, period, auto_shutdown, mirrored, children)",
    );
    has(
        &errs,
        r#"supervisor.children[0].restart: unknown value "sometimes" (expected one of: permanent, transient, temporary)"#,
    );
    has(
        &errs,
        r#"supervisor.children[0].shutdown: unknown value "later" (expected milliseconds, "brutal_kill" or "infinity")"#,
    );
    has(&errs, r#"supervisor.children[1].id: duplicate id "a""#);
    has(&errs, r#"supervisor.children[1].gpu: unknown behaviour "nosuch" (known: counter, echo, kv, test)"#);
    has(&errs, "supervisor.children[2].significant: a significant child cannot be permanent");
    has(&errs, r#"supervisor.children[3].name: "x/y" is also the name of supervisor.children[2]"#);
    has(&errs, "supervisor.children[4]: needs exactly one of `gpu`, `actor`, `supervisor` (found 2)");
    assert!(errs.iter().any(|e| e.starts_with("supervisor.children[5].name: invalid name `bad//name`")), "{errs:?}");
    has(&errs, "supervisor.children[5].backoff.initial_ms: must be at least 1, found 0");
    assert_eq!(errs.len(), 13, "{}", errs.join("\n"));
}

#[test]
fn nested_paths_and_simple_one_for_one_rules() {
    let errs = errors(
        r#"
[supervisor]
[[supervisor.children]]
id = "pool"
[supervisor.children.supervisor]
strategy = "simple_one_for_one"
auto_shutdown = "sometimes"
"#,
    );
    has(
        &errs,
        r#"supervisor.children[0].supervisor.auto_shutdown: unknown value "sometimes" (expected one of: never, any_significant, all_significant)"#,
    );
    has(&errs, "supervisor.children[0].supervisor.children: a simple_one_for_one supervisor needs exactly one child (the template), found 0");
}

#[test]
fn malformed_toml_and_wrong_types_are_located() {
    let errs = located("[supervisor\nstrategy = \"one_for_one\"\n");
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message.starts_with("invalid TOML"), "{errs:?}");
    assert_eq!(errs[0].line_col.map(|(line, _)| line), Some(1), "{errs:?}");
    assert!(errs[0].to_string().starts_with("line 1, column "), "{}", errs[0]);
    let errs = errors("[supervisor]\nintensity = \"three\"\nchildren = 4\n");
    has(&errs, "supervisor.intensity: expected an integer, found a string");
    has(&errs, "supervisor.children: expected an array of tables, found an integer");
    let errs = errors("supervisor = 3\n");
    has(&errs, "supervisor: expected a table, found an integer");
    let errs = errors("");
    has(&errs, "supervisor: missing table");
    let errs = errors("[supervisor]\n[[supervisor.children]]\ngpu = \"echo\"\ninit = [1, 300]\n");
    has(&errs, "supervisor.children[0].id: missing");
}

#[test]
fn a_template_declares_many_children_with_typed_init() {
    let spec = loader()
        .load_str(
            r#"
[supervisor]
[[supervisor.children]]
id = "head"
gpu = "echo"

[[supervisor.children]]
count = 50
id = "limiter-{i}"
gpu = "counter"
name = "limiter/client-{i}"
init = [{ u32 = 10 }, { u16 = "{i}" }, { f64 = 0.25 }, { bytes = "c{i}" }]
restart = "transient"

[[supervisor.children]]
id = "tail"
gpu = "echo"
"#,
        )
        .unwrap();
    assert_eq!(spec.children.len(), 52);
    assert_eq!((spec.children[0].id.as_str(), spec.children[51].id.as_str()), ("head", "tail"));
    for i in 0..50u16 {
        let child = &spec.children[1 + i as usize];
        assert_eq!(child.id, format!("limiter-{i}"));
        assert_eq!(child.name.as_deref(), Some(format!("limiter/client-{i}").as_str()));
        assert_eq!(child.restart, Restart::Transient);
        let ChildStart::Gpu(gpu) = &child.start else { panic!("{} is not a GPU child", child.id) };
        // struct { uint32_t capacity; uint16_t index; double rate; char tag[]; }: rate at 8.
        let mut want = 10u32.to_le_bytes().to_vec();
        want.extend(i.to_le_bytes());
        want.extend([0, 0]);
        want.extend(0.25f64.to_le_bytes());
        want.extend(format!("c{i}").bytes());
        assert_eq!(gpu.init_bytes(1), want, "init of {}", child.id);
    }
}

#[test]
fn template_mistakes_are_located_at_the_entry_and_index() {
    let errs = errors(
        r#"
[supervisor]
[[supervisor.children]]
id = "a"
gpu = "echo"
name = "w/3"

[[supervisor.children]]
count = 5
id = "w{i}"
gpu = "echo"
name = "w/{i}"

[[supervisor.children]]
count = 3
id = "same"
gpu = "echo"

[[supervisor.children]]
count = 4
id = "x{i}"
gpu = "echo"
init = [{ u8 = "{i}00" }]

[[supervisor.children]]
id = "lost-{i}"
gpu = "echo"

[[supervisor.children]]
count = 0
first = -1
id = "z{i}"
gpu = "echo"

[[supervisor.children]]
first = 2
id = "y"
gpu = "echo"

[[supervisor.children]]
count = 2
id = "big{i}"
gpu = "echo"
init = [{ zeros = 97 }]
"#,
    );
    has(&errs, r#"supervisor.children[1][i=3].name: "w/3" is also the name of supervisor.children[0]"#);
    has(&errs, "supervisor.children[2].id: a template of 3 children needs `{i}` in its id (each must differ)");
    has(&errs, "supervisor.children[3][i=3].init[0].u8: 300 does not fit u8 (0 to 255)");
    has(&errs, "supervisor.children[4].id: `{i}` outside a template (add `count = N`)");
    has(&errs, "supervisor.children[5].count: must be at least 1, found 0");
    has(&errs, "supervisor.children[5].first: must be at least 0, found -1");
    has(&errs, "supervisor.children[6].first: `first` belongs to a template: add `count`");
    has(&errs, "supervisor.children[7][i=0].init: 97 bytes, the most a create carries is 96");
    assert_eq!(errs.len(), 8, "each problem once, not once per instance:\n{}", errs.join("\n"));
}

#[test]
fn actors_resolve_through_the_loader() {
    let text = "[supervisor]\n[[supervisor.children]]\nid = \"c\"\nactor = \"cache\"\n";
    let errs = errors(text);
    has(&errs, r#"supervisor.children[0].actor: unknown actor "cache" (known: )"#);
    let loader =
        loader().actor("cache", |_ctx: StartContext| async { Err::<ractor::ActorCell, _>("unused".to_string()) });
    let spec = loader.load_str(text).unwrap();
    assert!(matches!(spec.children[0].start, ChildStart::Actor(_)));
}

#[test]
fn the_builder_is_checked_the_same_way() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("a", GpuChild::new("echo")).significant(true))
        .child(ChildSpec::gpu("a", GpuChild::new("echo")))
        .intensity(1, Duration::ZERO);
    let err = spec.validate().unwrap_err().to_string();
    assert!(err.contains("supervisor.period: must be positive"), "{err}");
    assert!(err.contains("supervisor.children[0].significant: a significant child cannot be permanent"), "{err}");
    assert!(err.contains(r#"supervisor.children[1].id: duplicate id "a""#), "{err}");
}

/// What a user fixing a file needs: every problem at once, each at its line and column, in that file.
#[test]
fn every_problem_is_reported_at_once_with_its_file_line_and_column() {
    let text = r#"[supervisor]
strategy = "one_for_one"

[[supervisor.children]]
id = "a"
gpu = "countr"
name = "app/x"
init = [{ u8 = 300 }, 7, { u32 = "y" }]

[[supervisor.children]]
id = "b"
gpu = "echo"
name = "app/x"
restrat = "transient"

[[supervisor.children]]
count = 3
id = "w-{j}"
gpu = "echo"
"#;
    let path = std::env::temp_dir().join(format!("ringvisor-spec-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let errs = match loader().load_file(&path) {
        Ok(_) => panic!("expected errors"),
        Err(SpecErrors(errs)) => errs,
    };
    std::fs::remove_file(&path).unwrap();
    let at = |p: &str| {
        errs.iter().find(|e| e.path == p).unwrap_or_else(|| panic!("no error at {p} in:\n{}", SpecErrors(errs.clone())))
    };
    let file = path.display().to_string();
    assert!(errs.iter().all(|e| e.file.as_deref() == Some(file.as_str())), "every error names the file");
    // a near miss is suggested; both bad init items, not only the first; the duplicate name in the same pass
    let gpu = at("supervisor.children[0].gpu");
    assert_eq!(gpu.line_col, Some((6, 1)));
    assert!(gpu.message.contains(r#"did you mean "counter"?"#), "{gpu}");
    assert_eq!(at("supervisor.children[0].init[0].u8").line_col, Some((8, 11)));
    assert_eq!(at("supervisor.children[0].init[2].u32").line_col, Some((8, 28)));
    let dup = at("supervisor.children[1].name");
    assert_eq!(dup.line_col, Some((13, 1)));
    assert!(dup.message.contains("is also the name of supervisor.children[0]"), "{dup}");
    let key = at("supervisor.children[1].restrat");
    assert!(key.message.contains(r#"did you mean "restart"?"#), "{key}");
    // `{j}` is an unknown placeholder, not a template without `{i}`
    let placeholder = at("supervisor.children[2][i=0].id");
    assert!(placeholder.message.contains("unknown placeholder `{j}`"), "{placeholder}");
    assert_eq!(placeholder.line_col, Some((18, 1)));
    assert!(!errs.iter().any(|e| e.message.contains("needs `{i}`")), "{}", SpecErrors(errs.clone()));
    assert_eq!(errs.len(), 6, "{}", SpecErrors(errs.clone()));
    let lines: Vec<usize> = errs.iter().filter_map(|e| e.line_col).map(|(line, _)| line).collect();
    assert_eq!(lines, [6, 8, 8, 13, 14, 18], "in the file's order");
    assert_eq!(gpu.to_string(), format!("{file}:6:1: supervisor.children[0].gpu: {}", gpu.message));
}

#[test]
fn a_tree_larger_than_its_devices_is_caught_when_loaded() {
    let text = "[supervisor]\n[[supervisor.children]]\ncount = 40\nid = \"w{i}\"\ngpu = \"echo\"\n\
                [[supervisor.children]]\nid = \"p\"\ngpu = \"echo\"\nslot = 64\n";
    let errs = match loader().slots(32).load_str(text) {
        Ok(_) => panic!("41 GPU children on 32 slots loaded"),
        Err(SpecErrors(errs)) => errs,
    };
    let msgs: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.path, e.message)).collect();
    has(&msgs, "supervisor.children[1].slot: slot 64 does not exist (the device has 32 slots)");
    let total = errs.iter().find(|e| e.path == "supervisor").expect("the capacity error");
    assert!(total.message.starts_with("the tree starts 41 GPU children; a device of 32 slots holds 32"), "{total}");
    assert!(total.message.contains("--slots"), "names the setting: {total}");
    assert_eq!(total.line_col, Some((1, 2)), "the `supervisor` of its header");
    // two devices of 32 hold them; a simple_one_for_one template is not counted
    assert!(loader().slots(32).devices(2).load_str(&text.replace("slot = 64", "slot = 3")).is_ok());
    let dynamic =
        "[supervisor]\nstrategy = \"simple_one_for_one\"\n[[supervisor.children]]\nid = \"t\"\ngpu = \"echo\"\n";
    assert!(loader().slots(0).load_str(dynamic).is_ok());
}

#[test]
fn a_gpu_child_is_mirrored_from_toml() {
    let text = "[supervisor]\n\
        [[supervisor.children]]\nid = \"m\"\ngpu = \"echo\"\nmirrored = true\n\
        [[supervisor.children]]\nid = \"r\"\ngpu = \"echo\"\nmirror_registered = true\nmirror_groups = [\"g1\", \"g2\"]\n\
        [[supervisor.children]]\nid = \"p\"\ngpu = \"echo\"\n\
        [[supervisor.children]]\nid = \"o\"\ngpu = \"echo\"\nmirrored = false\n";
    let spec = loader().load_str(text).expect("valid");
    let gpu = |i: usize| match &spec.children[i].start {
        ChildStart::Gpu(g) => g.clone(),
        _ => panic!("a GPU child"),
    };
    let set: Vec<Option<bool>> = (0..4).map(|i| gpu(i).is_mirrored()).collect();
    assert_eq!(set, [Some(true), Some(true), None, Some(false)], "unset: as the supervisor says");
    assert_eq!(spec.mirrored, None);
    let described = format!("{:?}", gpu(1));
    assert!(described.contains("registered: true") && described.contains("[\"g1\", \"g2\"]"), "{described}");

    let errs = errors(
        "[supervisor]\n[[supervisor.children]]\nid = \"a\"\ngpu = \"echo\"\nmirrored = 1\nmirror_groups = \"g\"\n\
         [[supervisor.children]]\nid = \"b\"\ngpu = \"echo\"\nmirrored = false\nmirror_groups = [\"g\", 3]\n\
         [[supervisor.children]]\nid = \"c\"\nsupervisor = {}\nmirrored = true\n",
    );
    has(&errs, "supervisor.children[0].mirrored: expected a boolean, found an integer");
    has(&errs, "supervisor.children[0].mirror_groups: expected an array of group names, found a string");
    has(&errs, "supervisor.children[1].mirror_groups[1]: expected a group name (a string)");
    has(&errs, "supervisor.children[1].mirrored: false, but `mirror_registered` or `mirror_groups` asks for a mirror");
    has(&errs, "supervisor.children[2].mirrored: only a GPU child has `mirrored` (this one is `supervisor`)");

    // a tree-wide default, for a supervisor and (unless they say) the supervisors below it
    let tree = "[supervisor]\nmirrored = false\n[[supervisor.children]]\nid = \"s\"\n\
        [supervisor.children.supervisor]\nmirrored = true\n";
    let spec = loader().load_str(tree).expect("valid");
    assert_eq!(spec.mirrored, Some(false));
    let ChildStart::Supervisor(nested) = &spec.children[0].start else { panic!("a supervisor") };
    assert_eq!(nested.mirrored, Some(true));
    let built = SupervisorSpec::new(Strategy::OneForOne)
        .mirrored(false)
        .child(ChildSpec::supervisor("s", SupervisorSpec::new(Strategy::OneForOne).mirrored(true)));
    assert_eq!(spec.outline(), built.outline());
    let errs = errors("[supervisor]\nmirrored = \"yes\"\n");
    has(&errs, "supervisor.mirrored: expected a boolean, found a string");
}
