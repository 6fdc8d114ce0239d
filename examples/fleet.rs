//! Fleet-wide counts: N processes count a keyed workload, each exporting
//! into one Redis; the fleet totals must equal the sum of every process's
//! own counts.
//!
//! ```sh
//! cargo run --release --example fleet --features redis -- --processes 3
//! ```
//!
//! Starts its own `redis-server` (free port, temporary directory, AOF
//! everysec), spawns the worker processes (this binary with `--worker`),
//! prints the fleet totals next to each process's counts with an OK/FAIL
//! verdict, and stops the server. Exits non-zero on FAIL.
//!
//! Inventory mode: the processes sell from one `FleetStock` in Redis until
//! it is gone, each thread taking one unit at a time through the process's
//! lease; prints what each process sold, the Redis remainder and the
//! verdict (sold == initial − remaining, never negative).
//!
//! ```sh
//! cargo run --release --example fleet --features redis -- --inventory 100000 --chunk 100
//! ```
//!
//! Cluster mode (crate feature `redis-cluster`): the same counting run over
//! a Redis Cluster of its own (six `redis-server --cluster-enabled yes` on
//! free ports, three masters with a replica each, the tests' harness in
//! `tests/common/cluster.rs`). The workers export through
//! `RedisClusterSink` (16 buckets), the totals are read through
//! `FleetReader::cluster` and checked as above, and each master's share of
//! the keys is printed. `--kill-master` SIGKILLs one master halfway
//! through the counting (and not before every worker folds into it),
//! waits for its replica's promotion (printing how long it took) and keeps
//! the workers counting until then: the totals must still be exact (the
//! sinks send again what the failover lost).
//!
//! ```sh
//! cargo run --release --example fleet --features redis-cluster -- --cluster --processes 4 --kill-master
//! ```

use clap::Parser;
use shardcount::export::redis::RedisSink;
use shardcount::export::{ExportConfig, Exporter, Sink};
use shardcount::fleet::{FleetError, FleetStock, FleetStockConfig};
use shardcount::RoughCounter;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "N processes count into one Redis; fleet totals checked exactly")]
struct Args {
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    processes: usize,
    /// Distinct keys in the workload.
    #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    keys: usize,
    /// Counting threads per process.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// How long each process counts, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    millis: u64,
    /// Key rows to print (the verdict covers all keys).
    #[arg(long, default_value_t = 8)]
    show: usize,
    /// Internal: run as a worker exporting to this Redis URL.
    #[arg(long)]
    worker: Option<String>,
    /// Internal: the worker's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Inventory mode: the units in the shared stock, below 2^53 (0:
    /// counting mode).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..1 << 53))]
    inventory: u64,
    /// Inventory mode: units a lease refill takes from Redis.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..1 << 53))]
    chunk: u64,
    /// Count into a Redis Cluster of this run's own (3 masters with a
    /// replica each) instead of one redis-server; needs the crate feature
    /// `redis-cluster`.
    #[arg(long, conflicts_with = "inventory")]
    cluster: bool,
    /// Cluster mode: SIGKILL a master halfway through the counting (once
    /// every worker folds into it), and keep the workers counting until its
    /// replica took over.
    #[arg(long, requires = "cluster")]
    kill_master: bool,
    /// Internal: run as a worker exporting to the Redis Cluster at these
    /// comma-separated node URLs.
    #[arg(long)]
    worker_cluster: Option<String>,
    /// Internal: after counting for `--millis`, count on until stdin
    /// closes (the parent closes it once a failover is over).
    #[arg(long)]
    hold: bool,
}

const PREFIX: &str = "fleet:";

fn main() {
    let args = Args::parse();
    if args.cluster || args.worker_cluster.is_some() {
        std::process::exit(cluster_mode(&args));
    }
    match (&args.worker, args.inventory) {
        (Some(url), 0) => worker(&args, url),
        (Some(url), _) => seller(&args, url),
        (None, 0) => std::process::exit(coordinator(&args)),
        (None, _) => std::process::exit(inventory(&args)),
    }
}

/// One process: counts into RoughCounters, exports every 50 ms, flushes at
/// the end and prints `key value` lines of its own counts.
fn worker(args: &Args, url: &str) {
    let sink = RedisSink::new(url, PREFIX).expect("redis url");
    let config = ExportConfig {
        interval: Duration::from_millis(50),
        ..ExportConfig::default()
    };
    count(args, sink, config, String::new);
}

/// A worker's run, whatever its sink: counts for `--millis` (with
/// `--hold`, on until stdin closes), flushes, and prints its stats line
/// (`note` appended) and `key value` lines of its own counts.
fn count(args: &Args, sink: impl Sink, config: ExportConfig, note: impl FnOnce() -> String) {
    let counters: Arc<Vec<Arc<RoughCounter>>> = Arc::new(
        (0..args.keys)
            .map(|_| Arc::new(RoughCounter::new()))
            .collect(),
    );
    let exporter = Exporter::with_config(sink, config);
    for (i, c) in counters.iter().enumerate() {
        exporter.register(&format!("k{i}"), Arc::clone(c));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..args.threads)
        .map(|t| {
            let (counters, stop) = (Arc::clone(&counters), Arc::clone(&stop));
            let mut x = (args.seed << 8 | t as u64) | 1;
            std::thread::spawn(move || {
                let n = counters.len() as u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1024 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // A skewed workload: low keys are hot.
                        let k = (x % n) * (x >> 32 & 7) / 8;
                        counters[k as usize].inc();
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(args.millis));
    if args.hold {
        // EOF (or an error: the parent is gone) ends the hold.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    if let Err(e) = exporter.flush(Instant::now() + Duration::from_secs(30)) {
        let why = std::error::Error::source(&e).map_or(String::new(), |c| format!(": {c}"));
        eprintln!("worker {}: {e}{why}", args.seed);
        std::process::exit(2);
    }
    let s = exporter.stats();
    println!(
        "# delivered {} batches {} errors {} gaps {} lost {}{}",
        s.delivered,
        s.batches,
        s.errors,
        s.gaps,
        s.lost,
        note()
    );
    for (i, c) in counters.iter().enumerate() {
        println!("k{i} {}", c.sum());
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().unwrap().port()
}

/// The redis-server this run owns; killed on drop.
struct Server(Child, std::path::PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn start_server() -> (Server, String) {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("shardcount-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(&dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}); install it with .ci/install-redis")
        });
    let server = Server(child, dir);
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(url.as_str()).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while client
        .get_connection_with_timeout(Duration::from_millis(200))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_err()
    {
        assert!(Instant::now() < until, "redis-server did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, url)
}

fn coordinator(args: &Args) -> i32 {
    let (server, url) = start_server();
    println!(
        "redis-server at {url}; {} processes x {} threads counting {} keys for {} ms",
        args.processes, args.threads, args.keys, args.millis
    );
    let children = spawn_workers(args, &["--worker", &url], false);
    let (own, ok) = collect(children);
    let keys = key_names(args);
    let full: Vec<String> = keys.iter().map(|k| format!("{PREFIX}{k}")).collect();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let fleet: Vec<Option<i64>> = redis::cmd("MGET").arg(&full).query(&mut conn).unwrap();
    let fleet: Vec<i64> = fleet.into_iter().map(|v| v.unwrap_or(0)).collect();
    let bad = compare(args, &keys, &own, &fleet);
    drop(server);
    verdict(args, ok, bad)
}

/// The workers of a counting run, each given `worker` (its mode and where
/// to export) and the run's settings; with `hold`, their stdin is a pipe
/// that holds them counting until it is closed (`--hold`).
fn spawn_workers(args: &Args, worker: &[&str], hold: bool) -> Vec<Child> {
    let exe = std::env::current_exe().unwrap();
    (0..args.processes)
        .map(|p| {
            let mut cmd = Command::new(&exe);
            cmd.args(worker)
                .args(["--seed", &(p + 1).to_string()])
                .args(["--keys", &args.keys.to_string()])
                .args(["--threads", &args.threads.to_string()])
                .args(["--millis", &args.millis.to_string()])
                .stdout(Stdio::piped());
            if hold {
                cmd.arg("--hold").stdin(Stdio::piped());
            }
            cmd.spawn().expect("spawn worker")
        })
        .collect()
}

/// Each worker's own counts, in order, and whether every worker succeeded
/// (prints their notes).
fn collect(children: Vec<Child>) -> (Vec<BTreeMap<String, i64>>, bool) {
    let mut own: Vec<BTreeMap<String, i64>> = Vec::new();
    let mut ok = true;
    for (p, mut child) in children.into_iter().enumerate() {
        let mut counts = BTreeMap::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(note) = line.strip_prefix("# ") {
                println!("process {p}: {note}");
            } else if let Some((k, v)) = line.split_once(' ') {
                counts.insert(k.to_string(), v.parse().unwrap());
            }
        }
        if !child.wait().unwrap().success() {
            println!("process {p} failed");
            ok = false;
        }
        own.push(counts);
    }
    (own, ok)
}

/// The workload's key names.
fn key_names(args: &Args) -> Vec<String> {
    (0..args.keys).map(|i| format!("k{i}")).collect()
}

/// Prints the fleet totals next to each process's counts (the first
/// `--show` keys and up to 5 that differ) and the grand totals; returns
/// how many keys differ from the sum of the processes' counts.
fn compare(args: &Args, keys: &[String], own: &[BTreeMap<String, i64>], fleet: &[i64]) -> usize {
    print!("{:>8} {:>12}", "key", "fleet");
    for p in 0..own.len() {
        print!(" {:>11}", format!("process {p}"));
    }
    println!(" {:>12}", "sum");
    let mut bad = 0;
    let (mut fleet_total, mut own_total) = (0i64, 0i64);
    for (i, k) in keys.iter().enumerate() {
        let per: Vec<i64> = own.iter().map(|m| m.get(k).copied().unwrap_or(0)).collect();
        let sum: i64 = per.iter().sum();
        fleet_total += fleet[i];
        own_total += sum;
        if sum != fleet[i] {
            bad += 1;
        }
        if i < args.show || sum != fleet[i] && bad <= 5 {
            print!("{k:>8} {:>12}", fleet[i]);
            for v in &per {
                print!(" {v:>11}");
            }
            println!(
                " {sum:>12}{}",
                if sum == fleet[i] { "" } else { "  <- differs" }
            );
        }
    }
    println!(
        "{:>8} {fleet_total:>12} (all keys; processes' own counts sum to {own_total})",
        "total"
    );
    bad
}

/// Prints the counting run's verdict; returns the exit code.
fn verdict(args: &Args, ok: bool, bad: usize) -> i32 {
    let verdict = ok && bad == 0;
    println!(
        "verdict: {} ({} of {} keys equal the sum of the processes' counts)",
        if verdict { "OK" } else { "FAIL" },
        args.keys - bad,
        args.keys
    );
    if verdict {
        0
    } else {
        1
    }
}

const STOCK: &str = "stock";

/// One selling process: `threads` threads take one unit at a time until
/// the fleet stock is gone (retrying while Redis is unreachable), then
/// the lease is flushed; prints `sold N`.
fn seller(args: &Args, url: &str) {
    let config = FleetStockConfig {
        chunk: args.chunk,
        ..FleetStockConfig::default()
    };
    let stock = FleetStock::new(url, PREFIX, STOCK, config).expect("redis url");
    // Every seller runs the same start-up; only the first init sets it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = stock.init(args.inventory) {
        if Instant::now() > deadline {
            eprintln!("worker {}: stock not set: {e}", args.seed);
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let sold: u64 = std::thread::scope(|s| {
        let threads: Vec<_> = (0..args.threads)
            .map(|_| {
                s.spawn(|| {
                    let mut sold = 0u64;
                    loop {
                        match stock.try_sub(1) {
                            Ok(()) => sold += 1,
                            Err(FleetError::Insufficient(_)) => return sold,
                            Err(e) => {
                                eprintln!("worker {}: {e}; retrying", args.seed);
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = stock.flush() {
        if Instant::now() > deadline {
            eprintln!("worker {}: lease not returned: {e}", args.seed);
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = stock.stats();
    println!(
        "# round trips {} granted {} returned {}",
        s.round_trips, s.granted, s.returned
    );
    println!("sold {sold}");
}

/// Inventory mode's coordinator: stocks Redis, runs the sellers, checks
/// sold == initial − remaining (never negative).
fn inventory(args: &Args) -> i32 {
    let (server, url) = start_server();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let key = format!("{PREFIX}{STOCK}");
    println!(
        "redis-server at {url}; {} processes x {} threads selling {} units (chunk {})",
        args.processes, args.threads, args.inventory, args.chunk
    );
    let exe = std::env::current_exe().unwrap();
    let children: Vec<Child> = (0..args.processes)
        .map(|p| {
            Command::new(&exe)
                .args(["--worker", &url, "--seed", &(p + 1).to_string()])
                .args(["--inventory", &args.inventory.to_string()])
                .args(["--chunk", &args.chunk.to_string()])
                .args(["--threads", &args.threads.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut ok = true;
    let mut total = 0u64;
    for (p, mut child) in children.into_iter().enumerate() {
        let mut sold = None;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(note) = line.strip_prefix("# ") {
                println!("process {p}: {note}");
            } else if let Some(n) = line.strip_prefix("sold ") {
                sold = n.parse::<u64>().ok();
            }
        }
        if !child.wait().unwrap().success() || sold.is_none() {
            println!("process {p} failed");
            ok = false;
        }
        let sold = sold.unwrap_or(0);
        println!("process {p}: sold {sold}");
        total += sold;
    }
    let remaining: Option<i64> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    let remaining = remaining.unwrap_or(0);
    drop(server);
    let exact =
        remaining >= 0 && i128::from(total) == i128::from(args.inventory) - i128::from(remaining);
    println!(
        "sold {total} in all; {remaining} left in Redis; initial {}",
        args.inventory
    );
    let verdict = ok && exact;
    println!(
        "verdict: {} (sold == initial - remaining{}, remaining never negative)",
        if verdict { "OK" } else { "FAIL" },
        if exact { "" } else { " does NOT hold" }
    );
    if verdict {
        0
    } else {
        1
    }
}

/// The tests' Redis Cluster harness (six nodes, killed by PID on drop).
#[cfg(feature = "redis-cluster")]
#[path = "../tests/common/cluster.rs"]
mod cluster;

#[cfg(not(feature = "redis-cluster"))]
fn cluster_mode(_: &Args) -> i32 {
    eprintln!(
        "error: --cluster needs the crate feature `redis-cluster`: \
         cargo run --release --example fleet --features redis-cluster -- --cluster"
    );
    2
}

#[cfg(feature = "redis-cluster")]
fn cluster_mode(args: &Args) -> i32 {
    match &args.worker_cluster {
        Some(urls) => {
            let urls: Vec<&str> = urls.split(',').collect();
            on_cluster::worker(args, &urls);
            0
        }
        None => on_cluster::coordinator(args),
    }
}

/// Cluster mode: the counting run over a Redis Cluster of its own.
#[cfg(feature = "redis-cluster")]
mod on_cluster {
    use super::cluster::{self, Cluster};
    use super::{collect, compare, count, key_names, spawn_workers, verdict, Args, PREFIX};
    use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    use shardcount::export::{Batch, ExportConfig, Outcome, Sink, SinkError};
    use shardcount::fleet::FleetReader;
    use std::process::Child;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Buckets of the layout: every worker and the reader use the same.
    const BUCKETS: usize = 16;

    /// The master `--kill-master` kills.
    const VICTIM: usize = 0;

    fn keys() -> ClusterKeys {
        ClusterKeys::new(PREFIX, BUCKETS)
    }

    /// The sink behind a lock, so the worker can read its repair counts
    /// after the exporter took it.
    #[derive(Clone)]
    struct Shared(Arc<Mutex<RedisClusterSink>>);

    impl Sink for Shared {
        fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
            self.0.lock().unwrap().deliver(batches)
        }
    }

    /// A worker exporting into the cluster at `urls`.
    pub(super) fn worker(args: &Args, urls: &[&str]) {
        let sink = RedisClusterSink::new(urls, keys()).expect("redis cluster urls");
        let shared = Shared(Arc::new(Mutex::new(sink)));
        let config = ExportConfig {
            interval: Duration::from_millis(50),
            // Retries within a second of a failover's end, not up to 5 s.
            max_backoff: Duration::from_millis(500),
            ..ExportConfig::default()
        };
        count(args, shared.clone(), config, || {
            let s = shared.0.lock().unwrap();
            format!("; cluster parts resent {} lost {}", s.resent(), s.lost())
        });
    }

    /// Whether `slot` lies in `ranges`.
    fn serves(ranges: &[(u16, u16)], slot: u16) -> bool {
        ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }

    pub(super) fn coordinator(args: &Args) -> i32 {
        // Its drop kills every redis-server by PID: before the verdict,
        // FAIL included, or while a panic unwinds.
        let mut c = Cluster::started();
        let urls = c.urls();
        let keys = keys();
        println!(
            "redis cluster: masters {:?}, replicas {:?}; {} processes x {} threads counting {} \
             keys for {} ms{}",
            c.masters,
            c.replicas.iter().flatten().collect::<Vec<_>>(),
            args.processes,
            args.threads,
            args.keys,
            args.millis,
            if args.kill_master {
                " and until a killed master's replica took over"
            } else {
                ""
            }
        );
        let joined = urls.join(",");
        let spawned = Instant::now();
        let mut children = spawn_workers(args, &["--worker-cluster", &joined], args.kill_master);
        if args.kill_master {
            let midway = spawned + Duration::from_millis(args.millis / 2);
            fail_over(&mut c, &keys, &mut children, args.processes, midway);
        }
        let (own, ok) = collect(children);
        let names = key_names(args);
        let read = FleetReader::cluster(&urls, keys.clone(), Duration::from_secs(1))
            .expect("node urls")
            .keys(&names)
            .values();
        let (fleet, ok) = match read {
            Ok((values, _)) => (values.into_iter().map(|(_, v)| v).collect(), ok),
            Err(e) => {
                println!("cannot read the fleet totals: {e}");
                (vec![0; names.len()], false)
            }
        };
        let bad = compare(args, &names, &own, &fleet);
        print_spread(&c, &keys);
        drop(c);
        verdict(args, ok, bad)
    }

    /// Once every worker has folded into master `VICTIM` (a bucket there
    /// has a writer for each) and not before `midway`, SIGKILLs it, waits
    /// for its replica's promotion, and lets the workers finish (closes
    /// their stdin).
    fn fail_over(
        c: &mut Cluster,
        keys: &ClusterKeys,
        children: &mut [Child],
        processes: usize,
        midway: Instant,
    ) {
        let port = c.masters[VICTIM];
        let bucket = (0..keys.buckets())
            .find(|&b| serves(&c.slots[VICTIM], keys.slot(b)))
            .expect("every master serves a bucket");
        let writers = keys.writers_key(bucket);
        let mut conn = cluster::conn(port);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let n: usize = redis::cmd("HLEN")
                .arg(&writers)
                .query(&mut conn)
                .unwrap_or(0);
            if n >= processes {
                break;
            }
            if Instant::now() > until
                || children
                    .iter_mut()
                    .any(|ch| ch.try_wait().is_ok_and(|s| s.is_some()))
            {
                println!(
                    "note: only {n} of {processes} processes folded into master {port} \
                     before its kill"
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(conn);
        std::thread::sleep(midway.saturating_duration_since(Instant::now()));
        let t = Instant::now();
        c.kill_master(VICTIM);
        println!("killed master {port} (SIGKILL) while the processes count");
        let new = c.wait_promotion(VICTIM);
        println!(
            "failover: replica {new} took over master {port}'s slots, cluster_state:ok on every \
             node, {:.2} s after the kill",
            t.elapsed().as_secs_f64()
        );
        for ch in children {
            drop(ch.stdin.take());
        }
    }

    /// Each master's keys (`DBSIZE`: counters and its buckets' writers
    /// hashes) and share of all.
    fn print_spread(c: &Cluster, keys: &ClusterKeys) {
        let sizes: Vec<u64> = c
            .masters
            .iter()
            .map(|&p| {
                redis::cmd("DBSIZE")
                    .query(&mut cluster::conn(p))
                    .unwrap_or(0)
            })
            .collect();
        let total: u64 = sizes.iter().sum();
        println!("keys per master (DBSIZE, counters and writers hashes), {total} in all:");
        for (i, (&port, &n)) in c.masters.iter().zip(&sizes).enumerate() {
            let buckets = (0..keys.buckets())
                .filter(|&b| serves(&c.slots[i], keys.slot(b)))
                .count();
            println!(
                "  master {port}: {n:>6} keys {:>5.1}% ({buckets} of {} buckets)",
                n as f64 * 100.0 / total.max(1) as f64,
                keys.buckets()
            );
        }
    }
}
