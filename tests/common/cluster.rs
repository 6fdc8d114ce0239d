//! A Redis Cluster of the test's own (issue 46): six `redis-server
//! --cluster-enabled yes` on free loopback ports, joined by `redis-cli
//! --cluster create` as three masters with a replica each; every process
//! SIGKILLed by PID on drop (other tests run redis-servers too, so never
//! by name). Needs redis-server and redis-cli (`.ci/install-redis`).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long startup, sync and promotion may take before a test panics.
const BOUND: Duration = Duration::from_secs(30);

struct Node {
    port: u16,
    child: Option<Child>,
}

pub struct Cluster {
    nodes: Vec<Node>,
    /// Replicas per master: 1, or 0 for a cluster of masters alone.
    per_master: usize,
    dir: PathBuf,
    /// Master ports, ordered by their first slot.
    pub masters: Vec<u16>,
    /// `replicas[i]` replicates `masters[i]` (None once promoted).
    pub replicas: Vec<Option<u16>>,
    /// `slots[i]`: the slot ranges `masters[i]` serves.
    pub slots: Vec<Vec<(u16, u16)>>,
}

/// One line of `CLUSTER NODES`.
struct Entry {
    id: String,
    port: u16,
    master: bool,
    failed: bool,
    master_id: String,
    slots: Vec<(u16, u16)>,
}

/// `n` ports, each with port+10000 (the cluster bus) free too, all below
/// 55536; the listeners are held until all are picked, so no repeats.
fn free_ports(n: usize) -> Vec<u16> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < n {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
        let port = l.local_addr().unwrap().port();
        if port < 55536 {
            if let Ok(bus) = TcpListener::bind(("127.0.0.1", port + 10000)) {
                ports.push(port);
                held.push(bus);
            }
        }
        held.push(l);
    }
    ports
}

pub fn conn(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

/// `cmd` on `port`, or the error as text (a node may be down or busy).
fn ask(port: u16, cmd: &redis::Cmd) -> Result<String, String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut c = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .map_err(|e| e.to_string())?;
    cmd.query::<String>(&mut c).map_err(|e| e.to_string())
}

fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

fn parse_nodes(text: &str) -> Vec<Entry> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // ip:port@bus
            let port = f[1].split(['@', ',']).next().unwrap();
            let port = port.rsplit(':').next().unwrap().parse().unwrap();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('[')) // slots being migrated
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            Entry {
                id: f[0].to_string(),
                port,
                master: f[2].contains("master"),
                failed: f[2].contains("fail"),
                master_id: f[3].to_string(),
                slots,
            }
        })
        .collect()
}

type Topology = (Vec<u16>, Vec<Option<u16>>, Vec<Vec<(u16, u16)>>);

/// Masters by first slot, their replicas and slots; None unless there are
/// three masters with slots, `per_master` replicas each (0 or 1), and no
/// node flagged failing.
fn topology(entries: &[Entry], per_master: usize) -> Option<Topology> {
    if entries.len() != 3 * (1 + per_master) || entries.iter().any(|e| e.failed) {
        return None;
    }
    let mut masters: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.master && !e.slots.is_empty())
        .collect();
    masters.sort_by_key(|e| e.slots[0].0);
    let mut replicas = Vec::new();
    for m in &masters {
        let r: Vec<u16> = entries
            .iter()
            .filter(|e| e.master_id == m.id)
            .map(|e| e.port)
            .collect();
        if r.len() != per_master {
            return None;
        }
        replicas.push(r.first().copied());
    }
    (masters.len() == 3).then(|| {
        let ports = masters.iter().map(|m| m.port).collect();
        let slots = masters.iter().map(|m| m.slots.clone()).collect();
        (ports, replicas, slots)
    })
}

/// Polls `check` until it returns None, or panics after `BOUND` with what
/// it last said (the node and its reply).
fn wait_until(what: &str, mut check: impl FnMut() -> Option<String>) {
    let until = Instant::now() + BOUND;
    loop {
        let Some(last) = check() else { return };
        assert!(
            Instant::now() < until,
            "cluster: {what} not reached within {BOUND:?}; last: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Cluster {
    /// A cluster started, joined, every slot covered and every replica in
    /// sync with its master.
    pub fn started() -> Cluster {
        Cluster::start(1)
    }

    /// Three masters and no replica, started as [`started`](Self::started)
    /// starts six nodes: a reference that feeds no replica.
    pub fn started_bare() -> Cluster {
        Cluster::start(0)
    }

    fn start(per_master: usize) -> Cluster {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "shardcount-cluster-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = Cluster {
            nodes: Vec::new(),
            per_master,
            dir,
            masters: Vec::new(),
            replicas: Vec::new(),
            slots: Vec::new(),
        };
        for port in free_ports(3 * (1 + per_master)) {
            let child = c.spawn(port);
            c.nodes.push(Node {
                port,
                child: Some(child),
            });
        }
        for n in &c.nodes {
            wait_until(&format!("PING on {}", n.port), || {
                ask(n.port, &redis::cmd("PING")).err()
            });
        }
        c.create();
        c.wait_ok();
        c.read_topology();
        c.wait_replicas_synced();
        c
    }

    fn spawn(&self, port: u16) -> Child {
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            // Small, so a killed master's replica takes over in seconds.
            .args(["--cluster-node-timeout", "1000"])
            .args(["--appendonly", "yes", "--appendfsync", "everysec"])
            .args(["--save", ""])
            // 7.0 waits 5 s before a diskless full sync by default.
            .args(["--repl-diskless-sync-delay", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): these tests need it on the PATH; \
                     install it with .ci/install-redis"
                )
            })
    }

    fn create(&self) {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args([
                "--cluster-replicas",
                &self.per_master.to_string(),
                "--cluster-yes",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): install .ci/install-redis"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect()
    }

    /// Every live node says `cluster_state:ok` with all 16384 slots ok.
    pub fn wait_ok(&self) {
        for port in self.live_ports() {
            wait_until(&format!("cluster_state:ok on node {port}"), || {
                let info = match ask(port, redis::cmd("CLUSTER").arg("INFO")) {
                    Ok(i) => i,
                    Err(e) => return Some(format!("node {port}: {e}")),
                };
                let ok = info_field(&info, "cluster_state") == Some("ok")
                    && info_field(&info, "cluster_slots_ok") == Some("16384");
                (!ok).then(|| format!("node {port}: {}", info.replace("\r\n", " ")))
            });
        }
    }

    /// Waits until every node's `CLUSTER NODES` shows the same three
    /// masters with slots and one replica each (`cluster_state:ok` can
    /// come before gossip has told every node every replica's role).
    fn read_topology(&mut self) {
        let mut seen = None;
        for port in self.live_ports() {
            wait_until(&format!("3 masters with a replica each on {port}"), || {
                let text = match ask(port, redis::cmd("CLUSTER").arg("NODES")) {
                    Ok(t) => t,
                    Err(e) => return Some(format!("node {port}: {e}")),
                };
                match topology(&parse_nodes(&text), self.per_master) {
                    Some(t) if seen.as_ref().is_none_or(|s| *s == t) => {
                        seen = Some(t);
                        None
                    }
                    _ => Some(format!("node {port}: {text}")),
                }
            });
        }
        (self.masters, self.replicas, self.slots) = seen.unwrap();
    }

    /// Each replica's link to its master is up (full sync done), so a
    /// WAIT on the master can count it.
    fn wait_replicas_synced(&self) {
        for r in self.replicas.iter().flatten() {
            wait_until(&format!("replica {r} in sync"), || {
                let info = ask(*r, redis::cmd("INFO").arg("replication"))
                    .unwrap_or_else(|e| e.to_string());
                let up = info_field(&info, "master_link_status") == Some("up");
                (!up).then(|| format!("node {r}: {}", info.replace("\r\n", " ")))
            });
        }
    }

    /// Sends `signal` to `replicas[i]` by PID (`SIGSTOP` freezes it, so
    /// its master's writes stop reaching it; `SIGCONT` resumes it).
    pub fn signal_replica(&self, i: usize, signal: i32) {
        let port = self.replicas[i].expect("no replica");
        let node = self.nodes.iter().find(|n| n.port == port).unwrap();
        let pid = node.child.as_ref().expect("replica not running").id();
        // SAFETY: kill(2) on a child this harness started and has not
        // reaped; it touches no memory of ours.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    }

    /// SIGKILLs `masters[i]` by PID, and reaps it.
    pub fn kill_master(&mut self, i: usize) {
        let port = self.masters[i];
        let node = self.nodes.iter_mut().find(|n| n.port == port).unwrap();
        let mut child = node.child.take().expect("master already killed");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits until `replicas[i]` has taken over `masters[i]`'s slots and
    /// every live node is `cluster_state:ok` again; returns its port,
    /// now `masters[i]`.
    pub fn wait_promotion(&mut self, i: usize) -> u16 {
        let new = self.replicas[i].expect("no replica left to promote");
        let want = self.slots[i].clone();
        for port in self.live_ports() {
            wait_until(&format!("node {port} to see {new} promoted"), || {
                let entries = match ask(port, redis::cmd("CLUSTER").arg("NODES")) {
                    Ok(t) => parse_nodes(&t),
                    Err(e) => return Some(format!("node {port}: {e}")),
                };
                let Some(e) = entries.iter().find(|e| e.port == new) else {
                    return Some(format!("node {port} does not list {new}"));
                };
                let ok = e.master && !e.failed && e.slots == want;
                (!ok).then(|| {
                    format!(
                        "node {port} sees {new} master={} failed={} slots={:?}",
                        e.master, e.failed, e.slots
                    )
                })
            });
        }
        self.wait_ok();
        self.masters[i] = new;
        self.replicas[i] = None;
        new
    }

    /// Starts `old` (a master killed by [`kill_master`](Self::kill_master)
    /// and replaced as `masters[i]`) again from its own directory: it
    /// rejoins as the new master's replica. Waits until it is in sync.
    pub fn restart_as_replica(&mut self, i: usize, old: u16) {
        let child = self.spawn(old);
        let node = self.nodes.iter_mut().find(|n| n.port == old).unwrap();
        assert!(node.child.is_none(), "node {old} is running");
        node.child = Some(child);
        wait_until(&format!("node {old} back as a replica in sync"), || {
            let info =
                ask(old, redis::cmd("INFO").arg("replication")).unwrap_or_else(|e| e.to_string());
            let ok = info_field(&info, "role") == Some("slave")
                && info_field(&info, "master_port") == Some(&self.masters[i].to_string())
                && info_field(&info, "master_link_status") == Some("up");
            (!ok).then(|| format!("node {old}: {}", info.replace("\r\n", " ")))
        });
        self.replicas[i] = Some(old);
    }

    /// Starts `redis-cli --cluster reshard`, moving `slots` slots (with
    /// their keys) from `masters[from]` to `masters[to]`; the caller waits
    /// for it, and asserts it succeeded.
    pub fn reshard(&self, from: usize, to: usize, slots: u16) -> Child {
        let id = |port: u16| ask(port, redis::cmd("CLUSTER").arg("MYID")).unwrap();
        Command::new("redis-cli")
            .args(["--cluster", "reshard"])
            .arg(format!("127.0.0.1:{}", self.masters[from]))
            .args(["--cluster-from", &id(self.masters[from])])
            .args(["--cluster-to", &id(self.masters[to])])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): install .ci/install-redis"))
    }

    /// Seed addresses for a cluster client (every node, live or not).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
