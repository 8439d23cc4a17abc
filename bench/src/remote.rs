//! Remote round trips over loopback: a call to a GPU actor of another process through `ringvisor::cluster`'s
//! gateway, the same through the actor's mirror with ractor_cluster's own remote call (a mirrored child), and
//! ractor_cluster's remote call of a plain ractor actor, all over the same node session. The other process is
//! this binary again, run with `--serve-node PORT` (see [`serve_node`]).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster::RactorClusterMessage;
use ringvisor::cluster::{Node, NodeConfig};
use ringvisor::prelude::*;
use ringvisor::supervisor::GpuMessage;

use crate::stats::{Summary, Unit};

const COOKIE: &str = "ringvisor-bench";
/// The process group of the serving node's plain echo actor.
const ECHO_GROUP: &str = "bench.echo";
/// The process group of the serving node's mirrored GPU actor.
const MIRROR_GROUP: &str = "bench.mirror";
const T: Duration = Duration::from_secs(10);

/// A plain ractor actor that ractor_cluster can reach: answers each number with itself.
struct RemoteEcho;

/// Its message: a remote-capable RPC.
#[derive(RactorClusterMessage)]
enum RemoteEchoMsg {
    #[rpc]
    Echo(u64, RpcReplyPort<u64>),
}

impl Actor for RemoteEcho {
    type Msg = RemoteEchoMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, myself: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
        ractor::pg::join(ECHO_GROUP.to_string(), vec![myself.get_cell()]);
        Ok(())
    }

    async fn handle(&self, _: ActorRef<Self::Msg>, msg: Self::Msg, _: &mut ()) -> Result<(), ActorProcessingErr> {
        let RemoteEchoMsg::Echo(v, reply) = msg;
        let _ = reply.send(v);
        Ok(())
    }
}

/// The `counter` GPU actor `bench/remote`, and `bench/mirror`: another, mirrored, in [`MIRROR_GROUP`].
fn tree() -> SupervisorSpec {
    SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("remote", GpuChild::new("counter")).name("bench/remote"))
        .child(ChildSpec::gpu("mirror", GpuChild::new("counter").mirror_group(MIRROR_GROUP)).name("bench/mirror"))
}

/// The first member of `group` on another node, once ractor_cluster has brought it here.
async fn remote_member<M: ractor::Message>(group: &str) -> ActorRef<M> {
    loop {
        match ractor::pg::get_members(&group.to_string()).into_iter().find(|c| !c.get_id().is_local()) {
            Some(cell) => return cell.into(),
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// `--serve-node PORT`: a node with [`tree`] and a [`RemoteEcho`], until stdin closes. Prints `ready`.
pub fn serve_node(port: u16) {
    let rt = crate::runtime::tokio();
    rt.block_on(async {
        let runtime = Runtime::start(DeviceConfig::default().slots(8), tree()).await.expect("runtime");
        let node = Node::start(&runtime, NodeConfig::new("server", port, COOKIE)).await.expect("node");
        let (echo, _) = Actor::spawn(None, RemoteEcho, ()).await.expect("echo");
        println!("ready");
        tokio::task::spawn_blocking(|| std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())).await.ok();
        echo.stop(None);
        node.stop();
        runtime.shutdown().await;
    });
}

/// Remote round trips over one session.
pub struct RemoteRoundTrips {
    /// `RemoteGpuRef::call` through the gateway.
    pub gateway: Summary,
    /// ractor_cluster's remote call of a mirrored GPU actor.
    pub mirror: Summary,
    /// ractor_cluster's remote call of a plain ractor actor.
    pub plain: Summary,
}

/// `samples` remote round trips each way: `RemoteGpuRef::call` to the serving node's counter, ractor_cluster's
/// remote call of its mirrored counter and of its plain echo actor, interleaved in blocks of 100 (one noisy
/// moment falls on all three).
pub fn remote_round_trip(samples: usize) -> RemoteRoundTrips {
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let mut server = Command::new(std::env::current_exe().expect("this binary"))
        .args(["--serve-node", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the serving node");
    let mut ready = String::new();
    BufReader::new(server.stdout.take().expect("stdout")).read_line(&mut ready).expect("ready line");
    assert_eq!(ready.trim(), "ready", "the serving node did not start");
    let rt = crate::runtime::tokio();
    let result = rt.block_on(async {
        let runtime = Runtime::start(DeviceConfig::default().slots(8), SupervisorSpec::new(Strategy::OneForOne))
            .await
            .expect("runtime");
        let node = Node::start(&runtime, NodeConfig::new("client", 0, COOKIE)).await.expect("node");
        node.connect(&format!("127.0.0.1:{port}")).await.expect("connect");
        let gpu = node.remote("server", "bench/remote").await.expect("remote handle");
        let echo: ActorRef<RemoteEchoMsg> = remote_member(ECHO_GROUP).await;
        let mirror: ActorRef<GpuMessage> = remote_member(MIRROR_GROUP).await;
        let (mut ours, mut mirrored, mut theirs) =
            (Vec::with_capacity(samples), Vec::with_capacity(samples), Vec::with_capacity(samples));
        let payload = 1i64.to_le_bytes();
        let warm = samples / 10;
        while ours.len() < samples + warm {
            for _ in 0..100 {
                let t0 = Instant::now();
                gpu.call(&payload, T).await.expect("remote GPU call");
                ours.push(t0.elapsed().as_nanos() as f64);
            }
            for _ in 0..100 {
                let t0 = Instant::now();
                let reply = mirror.call(|p| GpuMessage::Call(payload.to_vec(), p), Some(T)).await;
                assert!(matches!(reply, Ok(ractor::rpc::CallResult::Success(Ok(_)))), "remote mirror call");
                mirrored.push(t0.elapsed().as_nanos() as f64);
            }
            for i in 0..100u64 {
                let t0 = Instant::now();
                let v = echo.call(|p| RemoteEchoMsg::Echo(i, p), Some(T)).await.expect("remote call");
                assert!(matches!(v, ractor::rpc::CallResult::Success(x) if x == i));
                theirs.push(t0.elapsed().as_nanos() as f64);
            }
        }
        node.stop();
        runtime.shutdown().await;
        RemoteRoundTrips {
            gateway: Summary::of("ringvisor RemoteGpuRef::call over loopback", ours.split_off(warm), Unit::Nanos),
            mirror: Summary::of("ractor_cluster call of a mirrored GPU actor", mirrored.split_off(warm), Unit::Nanos),
            plain: Summary::of("ractor_cluster remote call of a plain actor", theirs.split_off(warm), Unit::Nanos),
        }
    });
    drop(server.stdin.take());
    let _ = server.wait();
    result
}
