//! A local three-node cluster: this process is node `a` and starts itself twice more as nodes `b` and `c`
//! (each with its own runtime and tree of `counter` GPU actors), then shows a cluster-wide lookup, a name
//! held on two nodes reported as a conflict, and a call to an actor on another node.
//!
//! `cargo run --example cluster`

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ringvisor::cluster::{Node, NodeConfig, Target};
use ringvisor::prelude::*;

const COOKIE: &str = "example-cookie";

/// Node `name`'s tree: `fleet/<name>/c0`, `fleet/<name>/c1`, and `shared/config` on every node.
fn tree(name: &str) -> SupervisorSpec {
    SupervisorSpec::new(Strategy::OneForOne)
        .child(ChildSpec::gpu("c0", GpuChild::new("counter")).name(format!("fleet/{name}/c0")))
        .child(ChildSpec::gpu("c1", GpuChild::new("counter")).name(format!("fleet/{name}/c1")))
        .child(ChildSpec::gpu("config", GpuChild::new("counter")).name("shared/config"))
}

/// Three distinct ports nobody listens on now (each held until all are picked).
fn free_ports() -> std::io::Result<[u16; 3]> {
    let held = [(); 3].map(|_| TcpListener::bind("127.0.0.1:0"));
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(held) {
        *port = listener?.local_addr()?.port();
    }
    Ok(ports)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    // A child process: `--node NAME PORT [PEER_PORT]` runs one node until its parent closes its stdin.
    if let [_, flag, name, port, rest @ ..] = args.as_slice() {
        if flag == "--node" {
            return run_node(name, port.parse()?, rest.first().map(|p| p.parse()).transpose()?).await;
        }
    }
    let [pa, pb, pc] = free_ports()?;
    let spawn = |name: &str, port: u16, peer: Option<u16>| -> std::io::Result<Child> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["--node", name, &port.to_string()]);
        if let Some(peer) = peer {
            cmd.arg(peer.to_string());
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::inherit()).spawn()
    };
    let mut b = spawn("b", pb, None)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = spawn("c", pc, Some(pb))?;

    let rt = Runtime::start(DeviceConfig::default().slots(8), tree("a")).await?;
    let node = Node::start(&rt, NodeConfig::new("a", pa, COOKIE)).await?;
    // b may still be starting: try for a few seconds.
    let mut connected = node.connect(&format!("127.0.0.1:{pb}")).await;
    for _ in 0..20 {
        if connected.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        connected = node.connect(&format!("127.0.0.1:{pb}")).await;
    }
    println!("a connected to {}", connected?);
    for _ in 0..100 {
        if node.peers().await.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("peers of a: {:?}", node.peers().await);

    let found = node.find("fleet/**").await?;
    println!("find(\"fleet/**\"):");
    for entry in &found.entries {
        let kind = if matches!(entry.target, Target::Local(_)) { "local" } else { "remote" };
        println!("  {:<14} on {} ({kind})", entry.name, entry.node);
    }
    for conflict in node.find("shared/*").await?.conflicts {
        println!("conflict: `{}` is registered on {:?}", conflict.name, conflict.nodes);
    }

    if let Some(remote) = node.remote("c", "fleet/c/c1").await {
        for delta in [10i64, 32] {
            let reply = remote.call(&delta.to_le_bytes(), Duration::from_secs(5)).await?;
            let total = i64::from_le_bytes(reply[..8].try_into()?);
            println!("call fleet/c/c1 on c with +{delta}: total {total}");
        }
    }
    let err =
        node.remote("b", "fleet/b/nobody").await.map(|r| async move { r.call(&[0; 8], Duration::from_secs(1)).await });
    if let Some(call) = err {
        if let Err(e) = call.await {
            println!("call to an unknown name on b: {e}");
        }
    }

    node.stop();
    rt.shutdown().await;
    for child in [&mut b, &mut c] {
        drop(child.stdin.take()); // closing stdin stops the node
        let _ = child.wait();
    }
    Ok(())
}

/// One node of the cluster, until its stdin closes.
async fn run_node(name: &str, port: u16, peer: Option<u16>) -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::start(DeviceConfig::default().slots(8), tree(name)).await?;
    let node = Node::start(&rt, NodeConfig::new(name, port, COOKIE)).await?;
    if let Some(peer) = peer {
        node.connect(&format!("127.0.0.1:{peer}")).await?;
    }
    tokio::task::spawn_blocking(|| std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())).await??;
    node.stop();
    rt.shutdown().await;
    Ok(())
}
