//! Three processes as one cluster on loopback: two `ringvisor node` processes and this test's own node.
//! A node with another cookie is refused; cluster-wide lookup lists every node's actors with their node
//! and reports a name held twice as a conflict; remote calls answer as local ones (results and errors);
//! a node killed mid-traffic ends every call to it answered or dead-lettered as `node_lost`, within its
//! deadline, its names leave the lookups, and come back with the restarted node.
#![cfg(all(feature = "cluster", feature = "cli"))]

mod support;

use std::time::{Duration, Instant};

use ringvisor::cluster::{Node, NodeConfig, RemoteError, Target};
use ringvisor::device::DeviceError;
use ringvisor::prelude::*;
use support::cluster::{eventually_async, free_ports, total, tree_file, NodeProcess};

const COOKIE: &str = "ringvisor-test-cookie";
const T: Duration = Duration::from_secs(10);

/// Node `name`'s process with the plain (unmirrored) tree.
fn node_process(name: &str, port: u16, cookie: &str, peers: &[u16]) -> NodeProcess {
    NodeProcess::start(name, port, cookie, peers, &tree_file(name, false))
}

/// The entries of a lookup as `name@node`, sorted.
async fn listed(node: &Node, pattern: &str) -> Vec<String> {
    node.find(pattern).await.unwrap().entries.iter().map(|e| format!("{}@{}", e.name, e.node)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_lookup_call_and_lose_a_node() {
    let spec = SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("c0", GpuChild::new("counter")).name("fleet/a/c0"))
        .child(ChildSpec::gpu("x", GpuChild::new("counter")).name("shared/x"));
    let rt = Runtime::start(DeviceConfig::default().slots(8), spec).await.unwrap();
    let [pa, pb, pc, pd, spare] = free_ports();
    let a = Node::start(&rt, NodeConfig::new("a", pa, COOKIE)).await.unwrap();
    assert!(Node::start(&rt, NodeConfig::new("a2", spare, COOKIE)).await.is_err(), "one node per process");

    // Another cookie: refused, and nothing of it is visible.
    let _stranger = node_process("d", pd, "another-cookie", &[]);
    let refused = a.connect(&format!("127.0.0.1:{pd}")).await;
    assert!(matches!(refused, Err(ringvisor::cluster::ClusterError::Refused { .. })), "{refused:?}");
    assert!(a.peers().await.is_empty());

    // b, then c connected to b; a connects to b and (transitively) to c.
    let _b = node_process("b", pb, COOKIE, &[]);
    let mut c = node_process("c", pc, COOKIE, &[pb]);
    assert_eq!(a.connect(&format!("127.0.0.1:{pb}")).await.unwrap(), "b");
    eventually_async("a sees b and c", T, || async { a.peers().await == ["b", "c"] }).await;

    let fleet = listed(&a, "fleet/**").await;
    let mut expected = vec!["fleet/a/c0@a".to_string()];
    for n in ["b", "c"] {
        expected.extend((0..3).map(|i| format!("fleet/{n}/c{i}@{n}")));
    }
    assert_eq!(fleet, expected);
    let shared = a.find("shared/*").await.unwrap();
    assert_eq!(shared.conflicts.len(), 1, "{:?}", shared.conflicts);
    assert_eq!(shared.conflicts[0].name, "shared/x");
    assert_eq!(shared.conflicts[0].nodes, ["a", "b", "c"]);

    // Remote calls answer as local ones: the same results...
    let local = rt.gpu("fleet/a/c0").unwrap();
    let remote = a.remote("b", "fleet/b/c0").await.expect("b is connected");
    for delta in [5i64, 7] {
        let here = local.call(&delta.to_le_bytes(), T).await.unwrap();
        let there = remote.call(&delta.to_le_bytes(), T).await.unwrap();
        assert_eq!(total(here.payload().unwrap()), total(&there));
    }
    assert_eq!(total(&remote.call(&0i64.to_le_bytes(), T).await.unwrap()), (12, 3));
    remote.send(&1i64.to_le_bytes()).await.unwrap();
    // Typed messages too (a `#[repr(C)]` request and reply: the counter's { total: i64, count: u64 }), and a
    // reply of another size is the same codec error as locally.
    remote.send_typed(&2i64).await.unwrap();
    let [total_there, count_there]: [i64; 2] = remote.call_typed(&0i64, T).await.unwrap();
    assert_eq!((total_there, count_there), (15, 6));
    let local_wrong = local.call_typed::<i64, [u8; 4]>(&0, T).await.unwrap_err();
    let remote_wrong = remote.call_typed::<i64, [u8; 4]>(&0, T).await.unwrap_err();
    let SendError::Device(DeviceError::Codec(local_why)) = local_wrong else { panic!("{local_wrong:?}") };
    assert!(matches!(&remote_wrong, RemoteError::Codec { message, .. } if *message == local_why), "{remote_wrong:?}");
    assert_eq!(remote_wrong.kind(), "device");
    // ...and the same errors: the device's error reply, and an unknown name.
    let short = remote.call(&[1, 2], T).await.unwrap_err();
    let local_short = local.call(&[1, 2], T).await.unwrap_err();
    let same_as_local = |kind: &str, message: &str| kind == "device" && message == local_short.to_string();
    assert!(matches!(&short, RemoteError::Refused { kind, message, .. } if same_as_local(kind, message)), "{short:?}");
    let nobody = a.remote("b", "fleet/b/nobody").await.unwrap().call(&[0; 8], T).await.unwrap_err();
    assert_eq!(nobody.kind(), "unknown_target", "{nobody:?}");

    // A remote handle stays valid across its actor's restarts: the `test` actor on b fails on op 2, b's
    // supervisor restarts it, and the same handle reaches the new incarnation.
    let probe = a.remote("b", "probe/b").await.unwrap();
    let echo = [1u32.to_le_bytes(), 7u32.to_le_bytes()].concat();
    assert_eq!(probe.call(&echo, T).await.unwrap(), echo);
    let failed = probe.call(&[2u32.to_le_bytes(), 0u32.to_le_bytes()].concat(), T).await.unwrap_err();
    assert_eq!(failed.kind(), "undelivered", "{failed:?}");
    eventually_async("the restarted probe answers through the same handle", T, || async {
        probe.call(&echo, Duration::from_secs(1)).await.as_deref() == Ok(&echo[..])
    })
    .await;

    // A handle found by lookup calls the same actor.
    let found = a.find("fleet/c/c1").await.unwrap();
    let Target::Remote { gpu: Some(c1) } = &found.entries[0].target else { panic!("{:?}", found.entries) };
    assert_eq!(c1.node(), "c");
    assert_eq!(total(&c1.call(&3i64.to_le_bytes(), T).await.unwrap()), (3, 1));

    // Node c is killed while calls to it are in flight: each is answered or ends as node_lost, in time.
    let before = rt.dead_letters().stats().total();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let traffic = tokio::spawn({
        let (c1, answered) = (c1.clone(), answered.clone());
        async move {
            let deadline = Duration::from_secs(2);
            loop {
                let t0 = Instant::now();
                let r = c1.call(&1i64.to_le_bytes(), deadline).await;
                assert!(t0.elapsed() < deadline + Duration::from_secs(3), "a call outlived its deadline: {r:?}");
                match r {
                    Ok(_) => answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    Err(RemoteError::NodeLost { .. }) => return,
                    Err(e) => panic!("a call to a dying node ended otherwise: {e}"),
                };
            }
        }
    });
    eventually_async("calls to c answered", T, || async { answered.load(std::sync::atomic::Ordering::Relaxed) >= 10 })
        .await;
    c.kill();
    traffic.await.unwrap();
    let letters = rt.dead_letters().snapshot();
    assert_eq!(rt.dead_letters().stats().total(), before + 1);
    assert!(letters
        .iter()
        .any(|l| l.reason == DeadLetterReason::NodeLost && l.target.as_deref() == Some("fleet/c/c1@c")));
    eventually_async("c's names leave the lookups", T, || async {
        !listed(&a, "fleet/**").await.iter().any(|e| e.ends_with("@c"))
    })
    .await;
    assert_eq!(a.peers().await, ["b"]);

    // c comes back (a fresh process, its tree started anew) and its names return.
    let _c = node_process("c", pc, COOKIE, &[pb]);
    eventually_async("c's names return", T, || async { listed(&a, "fleet/c/*").await.len() == 3 }).await;
    let c1 = a.remote("c", "fleet/c/c1").await.expect("c is back");
    assert_eq!(total(&c1.call(&2i64.to_le_bytes(), T).await.unwrap()), (2, 1));

    a.stop();
    rt.shutdown().await;
}
