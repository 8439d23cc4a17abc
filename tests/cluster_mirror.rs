//! Issue 36's three processes: two `ringvisor node` processes whose GPU children are mirrored (registered under
//! their names, in `pg` groups), and this test's process, a plain ractor_cluster node that uses nothing of
//! ringvisor's cluster layer. It finds the mirrors in the groups ractor_cluster keeps in step, by the names
//! they carry, and reaches them with ractor's own remote API (`call_t!`, `cast!`): replies and errors as the
//! nodes give them; a crash on one node ends that incarnation's mirror there and the next
//! incarnation's mirror joins the group under the same name.
#![cfg(all(feature = "cluster", feature = "cli"))]

mod support;

use std::time::Duration;

use ractor::{call_t, cast, Actor, ActorCell, ActorRef};
use ractor_cluster::node::NodeConnectionMode;
use ractor_cluster::NodeServer;
use ringvisor::supervisor::{GpuMessage, SendError};
use support::cluster::{free_ports, total, tree_file, NodeProcess};
use support::eventually_some;

const COOKIE: &str = "ringvisor-mirror-cookie";
const T: Duration = Duration::from_secs(10);
/// `call_t!`'s timeout, in milliseconds.
const T_MS: u64 = 10_000;

/// The members of `group` on other nodes.
fn remote_members(group: &str) -> Vec<ActorCell> {
    ractor::pg::get_members(&group.to_string()).into_iter().filter(|c| !c.get_id().is_local()).collect()
}

/// The member of `group` on another node that carries `name`, other than `not` (an ended incarnation's).
fn named(group: &str, name: &str, not: Option<ractor::ActorId>) -> Option<ActorRef<GpuMessage>> {
    remote_members(group)
        .into_iter()
        .find(|c| c.get_name().as_deref() == Some(name) && Some(c.get_id()) != not)
        .map(ActorRef::from)
}

/// A `test` actor's message: `op`, then `arg`.
fn op(op: u32, arg: u32) -> Vec<u8> {
    [op.to_le_bytes(), arg.to_le_bytes()].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_ractor_cluster_node_calls_mirrored_gpu_actors_on_two_nodes() {
    let [pa, pb, pc] = free_ports();
    let _a = NodeProcess::start("a", pa, COOKIE, &[], &tree_file("a", true));
    let _b = NodeProcess::start("b", pb, COOKIE, &[pa], &tree_file("b", true));

    // This process: ractor_cluster's node server, connected to a; b's mirrors come transitively.
    let server = NodeServer::new(
        pc,
        COOKIE.to_string(),
        "plain".to_string(),
        "127.0.0.1".to_string(),
        None,
        Some(NodeConnectionMode::Transitive),
    );
    let (server, _) = Actor::spawn(None, server, ()).await.expect("node server");
    ractor_cluster::client_connect(&server, format!("127.0.0.1:{pa}").as_str()).await.expect("connect to a");
    let fleet = eventually_some("both nodes' fleets in gpu.fleet", T, || {
        let members = remote_members("gpu.fleet");
        (members.len() == 6).then_some(members)
    })
    .await;
    let mut names: Vec<String> = fleet.iter().filter_map(ActorCell::get_name).collect();
    names.sort();
    let expected: Vec<String> =
        ["a", "b"].iter().flat_map(|n| (0..3).map(move |i| format!("fleet/{n}/c{i}"))).collect();
    assert_eq!(names, expected, "each mirror carries its child's name");

    // Calls and casts with ractor's macros, answered by the GPU actor on its node.
    let c0 = named("gpu.fleet", "fleet/b/c0", None).expect("fleet/b/c0");
    let reply = call_t!(c0, GpuMessage::Call, T_MS, 5i64.to_le_bytes().to_vec()).expect("delivered");
    assert_eq!(total(&reply.expect("a reply")), (5, 1));
    cast!(c0, GpuMessage::Cast(2i64.to_le_bytes().to_vec())).expect("cast");
    let reply = call_t!(c0, GpuMessage::Call, T_MS, 0i64.to_le_bytes().to_vec()).unwrap().unwrap();
    assert_eq!(total(&reply), (7, 3), "the cast was taken before the call");
    // A state read is answered as on its node: there (a `ringvisor node` with no bulk area) a counter's state is
    // larger than a reply, and the error says so here.
    let state = call_t!(c0, GpuMessage::State, T_MS).unwrap().unwrap_err();
    assert!(
        matches!(&state, SendError::Remote { kind, message } if kind == "device" && message.contains("bulk_bytes"))
    );
    // another node's actor, through the same group
    let a2 = named("gpu.fleet", "fleet/a/c2", None).expect("fleet/a/c2");
    assert_eq!(total(&call_t!(a2, GpuMessage::Call, T_MS, 1i64.to_le_bytes().to_vec()).unwrap().unwrap()), (1, 1));

    // Errors cross with their kind and their node's message: the counter's error answer to a short message.
    let short = call_t!(c0, GpuMessage::Call, T_MS, vec![1, 2]).unwrap().unwrap_err();
    assert!(matches!(&short, SendError::Remote { kind, .. } if kind == "device"), "{short:?}");
    assert_eq!(short.kind(), "device");

    // A crash: the test actor on a fails on op 2. The call is answered `undelivered`; that incarnation's mirror
    // ends, and the next one's joins the group under the same name and answers.
    let probe = named("gpu.probe", "probe/a", None).expect("probe/a");
    assert_eq!(call_t!(probe, GpuMessage::Call, T_MS, op(1, 7)).unwrap().unwrap(), op(1, 7));
    // The answer (`undelivered`) and the end of the mirror race to this node: ractor_cluster drops a reply that
    // arrives after its actor's end, and the caller reads that end, as a gen_server:call to a process that dies.
    match call_t!(probe, GpuMessage::Call, T_MS, op(2, 0)) {
        Ok(answer) => assert_eq!(answer.unwrap_err().kind(), "undelivered"),
        Err(ended) => assert!(matches!(ended, ractor::RactorErr::Messaging(_)), "{ended:?}"),
    }
    let next = eventually_some("the next incarnation's mirror in gpu.probe", T, || {
        named("gpu.probe", "probe/a", Some(probe.get_id()))
    })
    .await;
    assert_eq!(call_t!(next, GpuMessage::Call, T_MS, op(1, 9)).unwrap().unwrap(), op(1, 9));
    eventually_some("the ended mirror leaves the group", T, || {
        (!remote_members("gpu.probe").iter().any(|c| c.get_id() == probe.get_id())).then_some(())
    })
    .await;

    server.stop(None);
}
