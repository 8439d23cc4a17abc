//! Several processes as one cluster, on ractor_cluster (feature `cluster`, on by default).
//!
//! Each process runs its own [`Runtime`] and tree; a [`Node`] puts the runtime on the network: a
//! ractor_cluster `NodeServer` (its magic-cookie authentication: a node with another cookie is refused) and
//! a gateway actor the other nodes reach. Nothing is supervised across nodes (as in Erlang, a supervisor's
//! children are local), but names and calls work across them:
//! - [`Node::find`] looks a glob pattern up on every connected node: local and remote actors, each with its
//!   node; a name held on two nodes is reported in [`Found::conflicts`], not shadowed. Lookups ask the nodes
//!   each time, so a name is there while its actor is registered and gone when it stops or its node is lost.
//! - [`RemoteGpuRef`] calls and sends to a GPU actor on another node by name: the answer (or the error the
//!   same call returns there) comes back over ractor_cluster. It names the actor, not an incarnation, so it
//!   stays valid across the actor's restarts. A call whose node is lost ends with [`RemoteError::NodeLost`]
//!   and its message is a dead letter here with reason `node_lost`.
//!
//! ```no_run
//! # async fn demo(rt: &ringvisor::Runtime) -> Result<(), Box<dyn std::error::Error>> {
//! use ringvisor::cluster::{Node, NodeConfig};
//! let node = Node::start(rt, NodeConfig::new("a", 4701, "secret")).await?;
//! node.connect("127.0.0.1:4702").await?;
//! for entry in node.find("fleet/**").await?.entries {
//!     println!("{} on {}", entry.name, entry.node);
//! }
//! # Ok(()) }
//! ```

mod gateway;
mod remote;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorId, ActorRef};
use ractor_cluster::node::NodeServerSessionInformation;
use ractor_cluster::{NodeEventSubscription, NodeServer, NodeServerMessage};
use tokio::sync::broadcast;

use crate::supervisor::{ChildRef, Services};
use crate::Runtime;
pub use gateway::GatewayMsg;
use gateway::{Gateway, GATEWAYS};
pub use remote::{RemoteError, RemoteGpuRef};

/// How long [`Node::connect`] waits for the peer to authenticate and show its gateway, by default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a lookup waits for each remote node's answer.
const FIND_TIMEOUT: Duration = Duration::from_secs(5);

/// A node's name, port and cookie.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The node's name (unique in the cluster: it is how entries say where they live).
    pub name: String,
    /// The TCP port the node listens on for other nodes.
    pub port: u16,
    /// The magic cookie: nodes with different cookies refuse each other.
    pub cookie: String,
    /// The host name other nodes reach this one at (default `127.0.0.1`).
    pub hostname: String,
}

impl NodeConfig {
    /// A node named `name` listening on `port` of 127.0.0.1, with `cookie`.
    pub fn new(name: impl Into<String>, port: u16, cookie: impl Into<String>) -> Self {
        Self { name: name.into(), port, cookie: cookie.into(), hostname: "127.0.0.1".into() }
    }
}

/// Errors of the cluster layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The node's server or gateway could not start.
    #[error("node `{node}` could not start: {why}")]
    Start {
        /// The node.
        node: String,
        /// Why.
        why: String,
    },
    /// No TCP connection to the address.
    #[error("could not connect to {addr}: {why}")]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        why: String,
    },
    /// The peer closed the session before it authenticated (another cookie, or a node of the same name).
    #[error("{addr} refused the connection (a different cookie, or a node of the same name)")]
    Refused {
        /// The address.
        addr: String,
    },
    /// The peer did not become ready in time.
    #[error("{addr} did not become ready within {timeout:?}")]
    Timeout {
        /// The address.
        addr: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The pattern is not a valid glob.
    #[error(transparent)]
    Pattern(#[from] crate::supervisor::RegistryError),
}

/// Where a found actor lives.
#[derive(Clone, Debug)]
pub enum Target {
    /// On this node.
    Local(ChildRef),
    /// On another node: a GPU actor can be called through the handle; other actors are listed only.
    Remote {
        /// The handle (a GPU actor) or `None` (a host actor or supervisor, not callable from here).
        gpu: Option<RemoteGpuRef>,
    },
}

/// One actor a cluster-wide lookup found.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its registry name.
    pub name: String,
    /// The node it lives on.
    pub node: String,
    /// How to reach it.
    pub target: Target,
}

/// A name registered on more than one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The name.
    pub name: String,
    /// The nodes holding it, sorted.
    pub nodes: Vec<String>,
}

/// What [`Node::find`] found.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// Every match, sorted by name, then node.
    pub entries: Vec<Entry>,
    /// Names held on several nodes.
    pub conflicts: Vec<Conflict>,
    /// Nodes that did not answer in time (their names are missing from `entries`).
    pub unanswered: Vec<String>,
}

/// This process's runtime as a node of a cluster.
pub struct Node {
    name: String,
    services: Services,
    server: ActorRef<NodeServerMessage>,
    gateway: ActorRef<GatewayMsg>,
    sessions: broadcast::Sender<Session>,
    /// Remote gateways' node names, by actor id (asked once per gateway).
    names: Mutex<HashMap<ActorId, String>>,
    /// Set by [`Node::stop`].
    stopped: AtomicBool,
}

/// A session event of the node server, as [`Node::connect`] waits for them.
#[derive(Clone, Debug)]
struct Session {
    ready: bool,
    outgoing: bool,
    peer_addr: String,
}

/// Forwards the node server's session events to a broadcast channel.
struct SessionEvents(broadcast::Sender<Session>);

impl SessionEvents {
    fn forward(&self, ses: &NodeServerSessionInformation, ready: bool) {
        let _ = self.0.send(Session { ready, outgoing: !ses.is_server, peer_addr: ses.peer_addr.clone() });
    }
}

impl NodeEventSubscription for SessionEvents {
    fn node_session_opened(&self, _: NodeServerSessionInformation) {}
    fn node_session_authenticated(&self, _: NodeServerSessionInformation) {}
    fn node_session_ready(&self, ses: NodeServerSessionInformation) {
        self.forward(&ses, true);
    }
    fn node_session_disconnected(&self, ses: NodeServerSessionInformation) {
        self.forward(&ses, false);
    }
}

impl Node {
    /// Starts this runtime's node: the ractor_cluster node server on `config.port` and the gateway.
    /// One node per process: ractor's process groups, which carry the gateways, are the process's.
    pub async fn start(runtime: &Runtime, config: NodeConfig) -> Result<Node, ClusterError> {
        if NODE_RUNNING.swap(true, Ordering::AcqRel) {
            let why = "this process already runs a node (one per process)".into();
            return Err(ClusterError::Start { node: config.name.clone(), why });
        }
        let started = Self::start_server(runtime, &config).await;
        if started.is_err() {
            NODE_RUNNING.store(false, Ordering::Release);
        }
        started
    }

    async fn start_server(runtime: &Runtime, config: &NodeConfig) -> Result<Node, ClusterError> {
        let fail = |why: String| ClusterError::Start { node: config.name.clone(), why };
        let server = NodeServer::new(
            config.port,
            config.cookie.clone(),
            config.name.clone(),
            config.hostname.clone(),
            None,
            Some(ractor_cluster::node::NodeConnectionMode::Transitive),
        );
        let (server, _) = Actor::spawn(None, server, ()).await.map_err(|e| fail(e.to_string()))?;
        // From here a failure stops the server it leaves behind.
        let stop_server = |why: String| {
            server.stop(None);
            fail(why)
        };
        let (sessions, _) = broadcast::channel(256);
        let subscription = Box::new(SessionEvents(sessions.clone()));
        server
            .cast(NodeServerMessage::SubscribeToEvents { id: "ringvisor".into(), subscription })
            .map_err(|e| stop_server(e.to_string()))?;
        let services = runtime.services().clone();
        let (gateway, _) = Actor::spawn(None, Gateway, (config.name.clone(), services.clone()))
            .await
            .map_err(|e| stop_server(e.to_string()))?;
        Ok(Node {
            name: config.name.clone(),
            services,
            server,
            gateway,
            sessions,
            names: Mutex::default(),
            stopped: AtomicBool::new(false),
        })
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connects to the node listening at `addr` (`host:port`) and waits (up to [`CONNECT_TIMEOUT`]) until
    /// it has authenticated and its gateway is visible; returns its name. With several nodes, connecting
    /// to one connects to its peers too (ractor_cluster's transitive mode).
    pub async fn connect(&self, addr: &str) -> Result<String, ClusterError> {
        self.connect_within(addr, CONNECT_TIMEOUT).await
    }

    /// [`Node::connect`] with its own timeout.
    pub async fn connect_within(&self, addr: &str, timeout: Duration) -> Result<String, ClusterError> {
        let deadline = crate::device::deadline_after(timeout);
        let fail = |why: String| ClusterError::Connect { addr: addr.to_string(), why };
        let resolved = tokio::net::lookup_host(addr)
            .await
            .map_err(|e| fail(e.to_string()))?
            .next()
            .ok_or_else(|| fail("no address".into()))?
            .to_string();
        let before: Vec<ActorId> = remote_gateways().iter().map(ActorCell::get_id).collect();
        let mut events = self.sessions.subscribe();
        ractor_cluster::client_connect(&self.server, resolved.as_str()).await.map_err(|e| fail(e.to_string()))?;
        let timed_out = || ClusterError::Timeout { addr: addr.to_string(), timeout };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, events.recv()).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(broadcast::error::RecvError::Closed)) => return Err(fail("the node server stopped".into())),
                Ok(Ok(s)) if s.outgoing && s.peer_addr == resolved => {
                    if !s.ready {
                        return Err(ClusterError::Refused { addr: addr.to_string() });
                    }
                    break;
                }
                Ok(Ok(_)) => {}
            }
        }
        // Ready: its process groups arrive with the session; wait for a gateway that was not there before.
        loop {
            if let Some(cell) = remote_gateways().into_iter().find(|c| !before.contains(&c.get_id())) {
                let left = deadline.saturating_duration_since(Instant::now());
                return self.node_of(&cell.into(), left).await.ok_or_else(timed_out);
            }
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The names of the connected nodes whose gateways answer, sorted.
    pub async fn peers(&self) -> Vec<String> {
        let mut names: Vec<String> = self.gateways().await.into_iter().filter_map(Result::ok).map(|(n, _)| n).collect();
        names.sort();
        names
    }

    /// Every actor whose name matches the glob `pattern` (see `Registry::find`) on this node and every
    /// connected node.
    pub async fn find(&self, pattern: &str) -> Result<Found, ClusterError> {
        let mut entries: Vec<Entry> = self
            .services
            .registry()
            .find(pattern)?
            .into_iter()
            .map(|(name, child)| Entry { name, node: self.name.clone(), target: Target::Local(child) })
            .collect();
        let mut unanswered = Vec::new();
        // Every node is asked at once (each answers from its registry, without waiting on actors); a node's
        // name is asked once per gateway and remembered.
        let mut asks = tokio::task::JoinSet::new();
        for gateway in self.gateways().await {
            let (node, gateway) = match gateway {
                Ok(named) => named,
                Err(id) => {
                    unanswered.push(id);
                    continue;
                }
            };
            let pattern = pattern.to_string();
            asks.spawn(async move {
                let names = gateway.call(|p| GatewayMsg::Find(pattern, p), Some(FIND_TIMEOUT)).await;
                (gateway, node, names)
            });
        }
        while let Some(joined) = asks.join_next().await {
            // A task never panics (a call's errors are values), so a join error is not expected.
            let Ok((gateway, node, names)) = joined else { continue };
            let Ok(ractor::rpc::CallResult::Success(names)) = names else {
                unanswered.push(node);
                continue;
            };
            for (name, gpu) in wire::decode_names(&names) {
                let handle = gpu.then(|| {
                    RemoteGpuRef::new(node.clone(), name.clone(), gateway.clone(), self.services.dead_letters().clone())
                });
                entries.push(Entry { name, node: node.clone(), target: Target::Remote { gpu: handle } });
            }
        }
        unanswered.sort();
        entries.sort_by(|a, b| (&a.name, &a.node).cmp(&(&b.name, &b.node)));
        let mut holders: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for e in &entries {
            holders.entry(&e.name).or_default().push(e.node.clone());
        }
        let conflicts = holders
            .into_iter()
            .filter(|(_, nodes)| nodes.len() > 1)
            .map(|(name, nodes)| Conflict { name: name.to_string(), nodes })
            .collect();
        Ok(Found { entries, conflicts, unanswered })
    }

    /// The GPU actor named `name` on node `node` (which may be this one's name: then a handle through this
    /// node's own gateway), or `None` if that node is not connected.
    pub async fn remote(&self, node: &str, name: &str) -> Option<RemoteGpuRef> {
        let gateway = if node == self.name {
            self.gateway.clone()
        } else {
            self.gateways().await.into_iter().filter_map(Result::ok).find(|(n, _)| n == node)?.1
        };
        Some(RemoteGpuRef::new(node.to_string(), name.to_string(), gateway, self.services.dead_letters().clone()))
    }

    /// Stops the gateway and the node server (the other nodes see this node as lost); the process may start
    /// another node afterwards.
    pub fn stop(&self) {
        if !self.stopped.swap(true, Ordering::AcqRel) {
            self.gateway.stop(None);
            self.server.stop(None);
            NODE_RUNNING.store(false, Ordering::Release);
        }
    }

    /// The other nodes' gateways with their node names; `Err` (the gateway's id) for one that did not say its
    /// name in time. The remembered names of gateways no longer in the group (lost nodes) are dropped.
    async fn gateways(&self) -> Vec<Result<(String, ActorRef<GatewayMsg>), String>> {
        let members = remote_gateways();
        let ids: Vec<ActorId> = members.iter().map(ActorCell::get_id).collect();
        self.names.lock().unwrap_or_else(|e| e.into_inner()).retain(|id, _| ids.contains(id));
        let mut named = Vec::with_capacity(members.len());
        for cell in members {
            let gateway: ActorRef<GatewayMsg> = cell.into();
            named.push(match self.node_of(&gateway, FIND_TIMEOUT).await {
                Some(node) => Ok((node, gateway)),
                None => Err(format!("{:?}", gateway.get_id())),
            });
        }
        named
    }

    /// The name of the node a gateway belongs to (asked once, then remembered).
    async fn node_of(&self, gateway: &ActorRef<GatewayMsg>, timeout: Duration) -> Option<String> {
        let id = gateway.get_id();
        if let Some(name) = self.names.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Some(name.clone());
        }
        match gateway.call(GatewayMsg::Hello, Some(timeout)).await {
            Ok(ractor::rpc::CallResult::Success(name)) => {
                self.names.lock().unwrap_or_else(|e| e.into_inner()).insert(id, name.clone());
                Some(name)
            }
            _ => None,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether this process runs a node.
static NODE_RUNNING: AtomicBool = AtomicBool::new(false);

/// The other nodes' gateways, as ractor_cluster's process groups know them now.
fn remote_gateways() -> Vec<ActorCell> {
    ractor::pg::get_members(&GATEWAYS.to_string()).into_iter().filter(|c| !c.get_id().is_local()).collect()
}
