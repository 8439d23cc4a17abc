//! Registry: names, patterns, watch events, concurrency, and pattern lookups that do not scan every name.

use std::thread;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use ringvisor_supervisor::*;

struct Idle;

impl Actor for Idle {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

async fn cell() -> ActorCell {
    Idle::spawn(None, Idle, ()).await.unwrap().0.get_cell()
}

fn names(found: &[(String, ChildRef)]) -> Vec<&str> {
    found.iter().map(|(n, _)| n.as_str()).collect()
}

#[tokio::test]
async fn patterns_match_segments_depths_and_characters() {
    let reg = Registry::new();
    let c = cell().await;
    for n in ["fleet/sensors/1", "fleet/sensors/2", "fleet/sensors/10", "fleet/pumps/1", "fleet", "lab/sensors/1"] {
        reg.bind(n, ChildRef::unsupervised(n, c.clone())).unwrap();
    }
    let find = |p: &str| reg.find(p).unwrap();
    assert_eq!(names(&find("fleet/sensors/*")), ["fleet/sensors/1", "fleet/sensors/10", "fleet/sensors/2"]);
    assert_eq!(names(&find("fleet/sensors/?")), ["fleet/sensors/1", "fleet/sensors/2"]);
    assert_eq!(names(&find("fleet/*/1")), ["fleet/pumps/1", "fleet/sensors/1"]);
    assert_eq!(names(&find("*/sensors/1")), ["fleet/sensors/1", "lab/sensors/1"]);
    assert_eq!(
        names(&find("fleet/**")),
        ["fleet", "fleet/pumps/1", "fleet/sensors/1", "fleet/sensors/10", "fleet/sensors/2"],
        "`**` matches zero or more segments"
    );
    assert_eq!(names(&find("**/1")), ["fleet/pumps/1", "fleet/sensors/1", "lab/sensors/1"]);
    assert_eq!(find("**").len(), 6);
    assert!(find("fleet/sensors").is_empty(), "an inner node is not a name");
    assert_eq!(names(&find("fleet")), ["fleet"]);
    assert_eq!(names(&find("fleet/sensors/1*")), ["fleet/sensors/1", "fleet/sensors/10"], "`*` inside a segment");
    assert_eq!(names(&find("fl*/*/1")), ["fleet/pumps/1", "fleet/sensors/1"]);
    assert_eq!(names(&find("*/s*s/1")), ["fleet/sensors/1", "lab/sensors/1"]);
    assert_eq!(names(&find("fleet/[ps]*/1")), ["fleet/pumps/1", "fleet/sensors/1"]);
    assert_eq!(names(&find("fleet/[!p]*/?")), ["fleet/sensors/1", "fleet/sensors/2"]);
    assert_eq!(names(&find("**/[0-1]*")), ["fleet/pumps/1", "fleet/sensors/1", "fleet/sensors/10", "lab/sensors/1"]);
    assert!(find("fleet/sensors/1*x").is_empty());
    assert_eq!(reg.lookup("fleet/pumps/1").unwrap().id(), "fleet/pumps/1");
    assert!(reg.lookup("fleet/pumps").is_none());
    // the borrowing visitor sees exactly what `find` returns, in the same order, with or without `**`
    for pattern in ["fleet/sensors/*", "*/sensors/1", "fleet/**", "**/1", "fleet/[!p]*/?", "nothing/*"] {
        let mut seen = Vec::new();
        let n = reg.for_each_match(pattern, |name, child| seen.push((name.to_string(), child.id().to_string())));
        let want: Vec<(String, String)> = find(pattern).iter().map(|(n, c)| (n.clone(), c.id().to_string())).collect();
        assert_eq!((n.unwrap(), &seen), (want.len(), &want), "{pattern}");
    }
    assert!(reg.for_each_match("a/b**", |_, _| {}).is_err());
}

#[tokio::test]
async fn results_come_in_tree_order_once_each() {
    let reg = Registry::new();
    let c = cell().await;
    for n in ["a-c", "a/b", "a/b/c", "a", "0/1", "1", "a/1"] {
        reg.bind(n, ChildRef::unsupervised(n, c.clone())).unwrap();
    }
    let find = |p: &str| reg.find(p).unwrap();
    assert_eq!(names(&find("a*")), ["a", "a-c"]);
    assert_eq!(names(&find("a*/*")), ["a/1", "a/b"]);
    assert_eq!(names(&find("**")), ["0/1", "1", "a", "a/1", "a/b", "a/b/c", "a-c"], "a name's subtree follows it");
    assert_eq!(names(&find("**/1")), ["0/1", "1", "a/1"]);
    assert_eq!(names(&find("**/**/c")), ["a/b/c"], "reached by several ways, listed once");
}

#[tokio::test]
async fn invalid_names_and_patterns_are_refused_with_the_reason() {
    let reg = Registry::new();
    let c = cell().await;
    for bad in ["", "/a", "a/", "a//b", "a/*", "a b", "a/?"] {
        let err = reg.bind(bad, ChildRef::unsupervised("x", c.clone())).unwrap_err();
        assert!(matches!(err, RegistryError::InvalidName { .. }), "{bad}: {err}");
    }
    for bad in ["", "a//b", "a/b**", "**x", "a/b c", "a/[b", "a/[]"] {
        let err = reg.find(bad).unwrap_err();
        assert!(matches!(err, RegistryError::InvalidPattern { .. }), "{bad}: {err}");
    }
    assert!(reg.is_empty());
}

#[tokio::test]
async fn a_name_belongs_to_one_child_and_watchers_see_every_change() {
    let reg = Registry::new();
    let mut watch = reg.watch();
    let c = cell().await;
    let a = ChildRef::unsupervised("a", c.clone());
    let b = ChildRef::unsupervised("b", c);
    reg.bind("x/y", a.clone()).unwrap();
    reg.bind("x/y", a.clone()).unwrap(); // idempotent for the same child
    assert_eq!(reg.bind("x/y", b.clone()), Err(RegistryError::Taken("x/y".into())));
    reg.unbind("x/y", &b); // not b's: no-op
    assert!(reg.lookup("x/y").unwrap().same_child(&a));
    reg.unbind("x/y", &a);
    assert!(reg.lookup("x/y").is_none());
    assert!(reg.find("x/*").unwrap().is_empty(), "the index forgets released names");
    assert_eq!(watch.try_recv().unwrap(), RegistryEvent::Registered("x/y".into()));
    assert_eq!(watch.try_recv().unwrap(), RegistryEvent::Unregistered("x/y".into()));
    assert!(watch.try_recv().is_err());
}

#[tokio::test]
async fn a_pattern_lookup_over_100000_names_visits_only_its_subtree() {
    let reg = Registry::new();
    let c = cell().await;
    for group in 0..100 {
        for i in 0..1000 {
            let n = format!("fleet/g{group}/s{i}");
            reg.bind(&n, ChildRef::unsupervised(n.clone(), c.clone())).unwrap();
        }
    }
    assert_eq!(reg.len(), 100_000);
    let (found, visits) = reg.find_counting("fleet/g42/*").unwrap();
    assert_eq!(found.len(), 1000);
    assert!(visits <= 1003, "visited {visits} index nodes for 1,000 matches");
    let (found, visits) = reg.find_counting("fleet/g4?/s7").unwrap();
    assert_eq!(names(&found).len(), 10);
    assert!(visits < 250, "visited {visits} index nodes");
    let (found, visits) = reg.find_counting("fleet/g42/s1*").unwrap();
    assert_eq!(found.len(), 111, "s1, s10-s19, s100-s199");
    assert!(visits < 250, "visited {visits} index nodes for 111 matches");
    let (found, visits) = reg.find_counting("fleet/g42/s[2-3]?").unwrap();
    assert_eq!(found.len(), 20);
    assert!(visits < 1500, "visited {visits} index nodes: only g42's names of length 3");
    let (found, _) = reg.find_counting("fleet/**/s999").unwrap();
    assert_eq!(found.len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_binds_lookups_and_unbinds_stay_consistent() {
    let reg = Registry::new();
    let c = cell().await;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (reg, c) = (reg.clone(), c.clone());
            thread::spawn(move || {
                for i in 0..2000 {
                    let name = format!("w{t}/n{i}");
                    let child = ChildRef::unsupervised(name.clone(), c.clone());
                    reg.bind(&name, child.clone()).unwrap();
                    assert!(reg.lookup(&name).unwrap().same_child(&child));
                    assert!(!reg.find(&format!("w{t}/*")).unwrap().is_empty());
                    if i % 2 == 0 {
                        reg.unbind(&name, &child);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(reg.len(), 8 * 1000);
    for t in 0..8 {
        let found = reg.find(&format!("w{t}/*")).unwrap();
        assert_eq!(found.len(), 1000);
        assert!(found.iter().all(|(n, _)| n[n.rfind('n').unwrap() + 1..].parse::<u32>().unwrap() % 2 == 1));
    }
}
