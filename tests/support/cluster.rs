//! `ringvisor node` processes for the cluster tests: free ports, a tree file per node, a process killed when
//! dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Waits until the future `f` makes holds, looking every 20 ms; fails the test, naming `what`, past `within`.
pub async fn eventually_async<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `N` distinct ports nobody listens on now (each held until all are picked).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// A tree of `counter` actors `fleet/<node>/c0..c2` and `shared/x`, and a `test` actor `probe/<node>`. With
/// `mirrored`, the fleet and the probe are mirrored children registered under their names, the fleet in the
/// `pg` group `gpu.fleet`, the probe in `gpu.probe`.
pub fn tree_file(node: &str, mirrored: bool) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ringvisor-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{node}.toml"));
    let mirror = |group: &str| match mirrored {
        true => format!("mirror_registered = true\nmirror_groups = [\"{group}\"]\n"),
        false => String::new(),
    };
    let mut text = String::from("[supervisor]\nstrategy = \"one_for_one\"\n");
    for i in 0..3 {
        text += &format!("[[supervisor.children]]\nid = \"c{i}\"\ngpu = \"counter\"\nname = \"fleet/{node}/c{i}\"\n");
        text += &mirror("gpu.fleet");
    }
    text += "[[supervisor.children]]\nid = \"x\"\ngpu = \"counter\"\nname = \"shared/x\"\n";
    text += &format!("[[supervisor.children]]\nid = \"t\"\ngpu = \"test\"\nname = \"probe/{node}\"\n");
    text += &mirror("gpu.probe");
    std::fs::File::create(&path).unwrap().write_all(text.as_bytes()).unwrap();
    path
}

/// A `ringvisor node` process; killed when dropped.
pub struct NodeProcess(Child);

impl NodeProcess {
    /// Starts node `name` on `port` with `cookie` and the tree `tree`, connected to `peers`; waits for its
    /// `ready` line.
    pub fn start(name: &str, port: u16, cookie: &str, peers: &[u16], tree: &std::path::Path) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringvisor"));
        cmd.env_remove("RUST_LOG").arg("--plain").arg("node").arg(tree);
        cmd.args(["--name", name, "--port", &port.to_string(), "--cookie", cookie, "--slots", "16"]);
        for p in peers {
            cmd.args(["--connect", &format!("127.0.0.1:{p}")]);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("ringvisor node");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().expect("a line").expect("stdout");
        assert!(ready.starts_with("ready: node"), "{ready}");
        // Keep reading its output so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self(child)
    }

    /// Kills the process and waits for it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A counter's reply: (total, count).
pub fn total(reply: &[u8]) -> (i64, u64) {
    (i64::from_le_bytes(reply[..8].try_into().unwrap()), u64::from_le_bytes(reply[8..16].try_into().unwrap()))
}
