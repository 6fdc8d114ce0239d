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
//!
//! Cluster inventory mode (`--cluster --inventory N`): the processes sell
//! one `FleetStock::cluster` split over up to 4 parts (`StockSplit`: split
//! above `--split-above` script calls a second on a part, merge below
//! `--merge-below` in all; the defaults, 300 and 100 as in
//! tests/cluster_stock.rs, split the default load into 4 parts within
//! ~0.2 s and merge back within ~0.2 s of its end). Each process sells at
//! `--rate` sales a second (unpaced, 600,000 units go in ~0.2 s, nearly
//! all from one part before the split follows). The coordinator sets the stock once (`init`),
//! prints the parts in use whenever they change (the K key
//! `fleet:{stock#0}__parts` and each part's units, read every 100 ms),
//! then what each process sold, the remainder (the parts' sum), the most
//! parts in use and the parts in use once the load is gone (the workers
//! stay alive `--linger-ms` after selling, so the merge happens while they
//! run), and the verdict: sold == initial − remaining, never oversold.
//! `--kill-master` SIGKILLs the master serving part 0 once the stock is
//! split into all 4 parts (the last one stocked) or a third is taken, and
//! waits for its replica's promotion; the workers retry Redis errors
//! meanwhile and stop only when the parts are empty. `--durable` confirms
//! each take only once a replica holds it (`Durability::Replicas`), so a
//! failover never undoes a sold unit's take; the killed master then comes
//! back as the new master's replica, which durable takes on part 0 need.
//! Without `--durable`, a failover can undo takes the replica had not got
//! yet, and the verdict can show them oversold (`StockSplit::durability`).
//!
//! ```sh
//! cargo run --release --example fleet --features redis-cluster -- --cluster --inventory 600000 --processes 5 --kill-master --durable
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
// The cluster options are for the coordinator (`--cluster`) and its
// workers (`--worker-cluster`) alike.
#[command(group(clap::ArgGroup::new("on_cluster").args(["cluster", "worker_cluster"]).multiple(true)))]
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
    /// Count (or, with `--inventory`, sell) on a Redis Cluster of this
    /// run's own (3 masters with a replica each) instead of one
    /// redis-server; needs the crate feature `redis-cluster`.
    #[arg(long)]
    cluster: bool,
    /// Cluster mode: SIGKILL a master halfway through the counting (once
    /// every worker folds into it), and keep the workers counting until its
    /// replica took over. With `--inventory`: SIGKILL the master serving
    /// the stock's part 0 once the stock split into all its parts or a
    /// third of it is taken.
    #[arg(long, requires = "cluster")]
    kill_master: bool,
    /// Cluster inventory mode: a take counts as done only once a replica
    /// holds it (`Durability::Replicas`, 1 replica, 200 ms), so a failover
    /// never undoes a take whose units were sold.
    #[arg(long, requires = "on_cluster", requires = "inventory")]
    durable: bool,
    /// Cluster inventory mode: split (double the parts in use) when one
    /// part runs more script calls a second than this (`StockSplit::split_above`).
    #[arg(
        long,
        default_value_t = 300,
        requires = "on_cluster",
        requires = "inventory"
    )]
    split_above: u64,
    /// Cluster inventory mode: merge (halve the parts in use) when all
    /// parts together run fewer script calls a second than this, twice in
    /// a row (`StockSplit::merge_below`).
    #[arg(
        long,
        default_value_t = 100,
        requires = "on_cluster",
        requires = "inventory"
    )]
    merge_below: u64,
    /// Cluster inventory mode: sales a second each worker process aims at,
    /// spread over its threads (0: as fast as they can, which sells nearly
    /// all the stock before the split follows the load).
    #[arg(
        long,
        default_value_t = 40_000,
        requires = "on_cluster",
        requires = "inventory"
    )]
    rate: u64,
    /// Cluster inventory mode: how long each worker stays alive after it
    /// stopped selling, in milliseconds: its stock merges the parts back
    /// meanwhile, once the load is gone.
    #[arg(
        long,
        default_value_t = 3000,
        requires = "on_cluster",
        requires = "inventory"
    )]
    linger_ms: u64,
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
    match (&args.worker_cluster, args.inventory) {
        (Some(urls), 0) => {
            let urls: Vec<&str> = urls.split(',').collect();
            on_cluster::worker(args, &urls);
            0
        }
        (Some(urls), _) => {
            let urls: Vec<&str> = urls.split(',').collect();
            stock_on_cluster::seller(args, &urls)
        }
        (None, 0) => on_cluster::coordinator(args),
        (None, _) => stock_on_cluster::coordinator(args),
    }
}

/// Cluster mode: the counting run over a Redis Cluster of its own.
#[cfg(feature = "redis-cluster")]
mod on_cluster {
    use super::cluster::{self, Cluster};
    use super::{collect, compare, count, key_names, spawn_workers, verdict, Args, PREFIX};
    use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    use shardcount::export::ExportConfig;
    use shardcount::fleet::FleetReader;
    use std::process::Child;
    use std::time::{Duration, Instant};

    /// Buckets of the layout: every worker and the reader use the same.
    const BUCKETS: usize = 16;

    /// The master `--kill-master` kills.
    const VICTIM: usize = 0;

    fn keys() -> ClusterKeys {
        ClusterKeys::new(PREFIX, BUCKETS)
    }

    /// A worker exporting into the cluster at `urls`.
    pub(super) fn worker(args: &Args, urls: &[&str]) {
        let sink = RedisClusterSink::new(urls, keys()).expect("redis cluster urls");
        let repairs = sink.repairs();
        let config = ExportConfig {
            interval: Duration::from_millis(50),
            // Retries within a second of a failover's end, not up to 5 s.
            max_backoff: Duration::from_millis(500),
            ..ExportConfig::default()
        };
        count(args, sink, config, || {
            format!(
                "; cluster parts resent {} lost {}",
                repairs.resent(),
                repairs.lost()
            )
        });
    }

    /// Whether `slot` lies in `ranges`.
    pub(super) fn serves(ranges: &[(u16, u16)], slot: u16) -> bool {
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

/// Cluster inventory mode: the processes sell one `FleetStock` split over
/// up to `PARTS` parts of a Redis Cluster of its own, while the
/// coordinator watches the parts in use (and, with `--kill-master`, kills
/// the master of part 0).
#[cfg(feature = "redis-cluster")]
mod stock_on_cluster {
    use super::cluster::{self, Cluster};
    use super::on_cluster::serves;
    use super::{Args, PREFIX, STOCK};
    use redis::cluster::{ClusterClientBuilder, ClusterConnection};
    use shardcount::export::redis_cluster::Durability;
    use shardcount::fleet::{FleetError, FleetStock, FleetStockConfig, StockSplit};
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// The most parts the stock splits into.
    const PARTS: usize = 4;

    /// A selling thread checks its pace every this many sales.
    const PACED: u64 = 16;

    /// How long a worker may sell (or wait for a part to come back) before
    /// it gives up: a run that cannot end fails instead of hanging.
    const SELLING_BOUND: Duration = Duration::from_secs(120);

    /// The split every process uses (the coordinator's `init` too).
    fn split(args: &Args) -> StockSplit {
        StockSplit {
            parts: PARTS,
            split_above: args.split_above,
            merge_below: args.merge_below,
            durability: if args.durable {
                Durability::Replicas {
                    replicas: 1,
                    timeout: Duration::from_millis(200),
                }
            } else {
                Durability::Master
            },
        }
    }

    /// `--chunk`; an idle worker pass every 50 ms (a quarter of `idle`), so
    /// the parts follow the load within a run of a few seconds; and calls
    /// that give up after 300 ms, so a call stuck on a killed master fails
    /// soon and is retried (as in tests/cluster_stock.rs).
    fn config(args: &Args) -> FleetStockConfig {
        FleetStockConfig {
            chunk: args.chunk,
            idle: Duration::from_millis(200),
            timeout: Duration::from_millis(300),
        }
    }

    /// Part `j`'s units: `<prefix>{<name>#j}`.
    fn part_key(j: usize) -> String {
        format!("{PREFIX}{{{STOCK}#{j}}}")
    }

    /// The K key: how many parts are in use (absent: 1).
    fn parts_key() -> String {
        format!("{}__parts", part_key(0))
    }

    /// Part `j`'s script calls so far (counted by the lease script).
    fn calls_key(j: usize) -> String {
        format!("{}__calls", part_key(j))
    }

    /// Sells one unit at a time until every part is empty; returns what it
    /// sold and, if it had to stop early, why. A Redis error (a master
    /// down, a failover, a durable take without a replica) is retried in a
    /// few ms; a refusal means sold out only once the parts hold nothing
    /// (until then other leases or a failing-over part still hold units).
    fn sell(
        stock: &FleetStock,
        pace: Option<Duration>,
        deadline: Instant,
        errors: &AtomicU64,
        first_error: &Mutex<Option<String>>,
    ) -> (u64, Option<String>) {
        let mut sold = 0u64;
        let mut next = Instant::now();
        let retry = |e: String| {
            // Relaxed: a tally printed after the threads are joined.
            errors.fetch_add(1, Ordering::Relaxed);
            first_error.lock().unwrap().get_or_insert(e);
        };
        loop {
            match stock.try_sub(1) {
                Ok(()) => {
                    sold += 1;
                    if let Some(pace) = pace.filter(|_| sold.is_multiple_of(PACED)) {
                        next += pace;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else if now - next > Duration::from_millis(20) {
                            // Behind after a stall: carry on at the rate,
                            // without a burst to catch up.
                            next = now;
                        }
                    }
                    continue;
                }
                Err(FleetError::Insufficient(_)) => match stock.remaining() {
                    Ok(0) => return (sold, None),
                    Ok(_) => {}
                    Err(FleetError::Redis(e)) => retry(e),
                    Err(e) => return (sold, Some(e.to_string())),
                },
                Err(FleetError::Redis(e)) => retry(e),
                Err(e) => return (sold, Some(e.to_string())),
            }
            if Instant::now() > deadline {
                return (sold, Some(format!("still selling after {SELLING_BOUND:?}")));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One selling process (`--worker-cluster` with `--inventory`): sells
    /// until every part is empty, returns its lease, stays alive for
    /// `--linger-ms` (its stock's idle worker sees the load gone and merges
    /// the parts back meanwhile), then prints its stats and `sold N`.
    /// Returns the exit code.
    pub(super) fn seller(args: &Args, urls: &[&str]) -> i32 {
        let stock = FleetStock::cluster(urls, PREFIX, STOCK, split(args), config(args))
            .expect("redis cluster urls");
        let errors = AtomicU64::new(0);
        let first_error = Mutex::new(None);
        let most_parts = AtomicUsize::new(1);
        let selling = AtomicBool::new(true);
        let deadline = Instant::now() + SELLING_BOUND;
        // How long each thread takes for `PACED` sales at `--rate`.
        let pace = (args.rate > 0).then(|| {
            Duration::from_secs_f64(PACED as f64 * args.threads as f64 / args.rate as f64)
        });
        let (sold, failed) = std::thread::scope(|s| {
            s.spawn(|| {
                // Relaxed: flags and tallies read after the scope.
                while selling.load(Ordering::Relaxed) {
                    most_parts.fetch_max(stock.parts_in_use(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let threads: Vec<_> = (0..args.threads)
                .map(|_| s.spawn(|| sell(&stock, pace, deadline, &errors, &first_error)))
                .collect();
            let mut sold = 0u64;
            let mut failed = None;
            for t in threads {
                let (n, why) = t.join().unwrap();
                sold += n;
                failed = failed.or(why);
            }
            selling.store(false, Ordering::Relaxed);
            (sold, failed)
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = stock.flush() {
            if Instant::now() > deadline {
                eprintln!("worker {}: lease not returned: {e}", args.seed);
                return 2;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(args.linger_ms));
        let s = stock.stats();
        let first = first_error.lock().unwrap().take();
        println!(
            "# round trips {} granted {} returned {} lost ops {}; redis errors {}{}; \
             parts in use up to {} while selling, {} after lingering {} ms",
            s.round_trips,
            s.granted,
            s.returned,
            s.lost_ops,
            errors.load(Ordering::Relaxed),
            first.map_or(String::new(), |e| format!(" (first: {e})")),
            most_parts.load(Ordering::Relaxed),
            stock.parts_in_use(),
            args.linger_ms
        );
        println!("sold {sold}");
        match failed {
            Some(why) => {
                eprintln!("worker {}: {why}", args.seed);
                2
            }
            None => 0,
        }
    }

    /// K, each part's units and each part's script calls, read in one
    /// cluster pipeline.
    struct Parts {
        k: usize,
        units: Vec<i64>,
        calls: Vec<u64>,
    }

    fn read(c: &mut ClusterConnection) -> redis::RedisResult<Parts> {
        let mut pipe = redis::cluster::cluster_pipe();
        pipe.cmd("GET").arg(parts_key());
        for j in 0..PARTS {
            pipe.cmd("GET").arg(part_key(j));
            pipe.cmd("GET").arg(calls_key(j));
        }
        let got: Vec<Option<i64>> = pipe.query(c)?;
        Ok(Parts {
            k: got[0].map_or(1, |k| k.max(1) as usize),
            units: got[1..].iter().step_by(2).map(|v| v.unwrap_or(0)).collect(),
            calls: got[2..]
                .iter()
                .step_by(2)
                .map(|v| v.unwrap_or(0).max(0) as u64)
                .collect(),
        })
    }

    /// A fresh cluster connection; short timeouts, so a read that meets a
    /// killed master fails fast (and the next one reconnects: the sync
    /// cluster client keeps a killed master's address).
    fn connect(urls: &[String]) -> redis::RedisResult<ClusterConnection> {
        ClusterClientBuilder::new(urls.to_vec())
            .connection_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(300))
            .build()?
            .get_connection()
    }

    /// `connect` and `read`, retried for up to 10 s.
    fn read_settled(urls: &[String]) -> Result<Parts, String> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match connect(urls).and_then(|mut c| read(&mut c)) {
                Ok(p) => return Ok(p),
                Err(e) if Instant::now() > until => return Err(e.to_string()),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Each part's units, one `GET` at a time on a fresh connection: None
    /// for a part that cannot be read.
    fn read_each(urls: &[String]) -> Vec<Option<i64>> {
        let mut c = connect(urls).ok();
        (0..PARTS)
            .map(|j| {
                let got = redis::cmd("GET")
                    .arg(part_key(j))
                    .query::<Option<i64>>(c.as_mut()?);
                match got {
                    Ok(v) => Some(v.unwrap_or(0)),
                    Err(_) => {
                        c = connect(urls).ok();
                        None
                    }
                }
            })
            .collect()
    }

    /// What the watcher saw, for the main thread.
    struct Watch {
        start: Instant,
        initial: u64,
        /// The most parts in use seen.
        most: AtomicUsize,
        /// Whether all `PARTS` parts have been in use and the last of them
        /// has held units: the last split's move has begun arriving (as
        /// tests/cluster_stock.rs waits before its kill).
        split_done: AtomicBool,
        /// Each part's units, as last read.
        units: Mutex<Vec<i64>>,
        /// Units taken from the parts so far (initial − their sum); −1
        /// before the first read.
        taken: AtomicI64,
        /// The highest rate of script calls one part ran, a second.
        peak: AtomicU64,
        /// Every change of K: when, and the new K.
        changes: Mutex<Vec<(Instant, usize)>>,
        /// Since when the parts have been seen empty.
        dry: Mutex<Option<Instant>>,
        done: AtomicBool,
    }

    impl Watch {
        fn at(&self, t: Instant) -> f64 {
            t.saturating_duration_since(self.start).as_secs_f64()
        }
    }

    /// Reads the parts every 100 ms until `done`; prints a line whenever K
    /// changes, and when the cluster cannot be read and can be again.
    fn watch(urls: &[String], w: &Watch) {
        let mut conn: Option<ClusterConnection> = None;
        let mut k = 0;
        let mut last: Option<(Instant, Vec<u64>)> = None;
        let mut down: Option<Instant> = None;
        // Relaxed: tallies and a stop flag, no data published through them.
        while !w.done.load(Ordering::Relaxed) {
            if conn.is_none() {
                conn = connect(urls).ok();
            }
            let got = match conn.as_mut() {
                Some(c) => read(c).map_err(|e| e.to_string()),
                None => Err("no connection".to_string()),
            };
            let now = Instant::now();
            let p = match got {
                Ok(p) => p,
                Err(e) => {
                    conn = None;
                    if down.is_none() {
                        println!(
                            "{:>7.2} s  cannot read the parts ({e}); retrying",
                            w.at(now)
                        );
                    }
                    let since = *down.get_or_insert(now);
                    // Every half second of an outage, the parts that can
                    // be read (the others' masters are up).
                    let ticks = |t: Instant| (t - since).as_millis() / 500;
                    if ticks(now) > ticks(now - Duration::from_millis(100)) {
                        let each: Vec<String> = read_each(urls)
                            .into_iter()
                            .map(|u| u.map_or("?".into(), |u| u.to_string()))
                            .collect();
                        println!(
                            "{:>7.2} s  units per part [{}] (?: cannot be read)",
                            w.at(Instant::now()),
                            each.join(", ")
                        );
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            if let Some(since) = down.take() {
                println!(
                    "{:>7.2} s  the parts can be read again ({:.2} s without)",
                    w.at(now),
                    (now - since).as_secs_f64()
                );
            }
            let rates: Option<Vec<u64>> = last.as_ref().map(|(t, before)| {
                let dt = (now - *t).as_secs_f64().max(1e-3);
                p.calls
                    .iter()
                    .zip(before)
                    .map(|(c, b)| (c.saturating_sub(*b) as f64 / dt) as u64)
                    .collect()
            });
            last = Some((now, p.calls.clone()));
            if let Some(r) = &rates {
                w.peak
                    .fetch_max(r.iter().copied().max().unwrap_or(0), Ordering::Relaxed);
            }
            if p.k == PARTS && p.units[PARTS - 1] > 0 {
                w.split_done.store(true, Ordering::Relaxed);
            }
            let sum: i64 = p.units.iter().sum();
            w.units.lock().unwrap().clone_from(&p.units);
            let taken = w.initial as i64 - sum;
            w.taken.store(taken, Ordering::Relaxed);
            {
                let mut dry = w.dry.lock().unwrap();
                match (sum, *dry) {
                    (0, None) => {
                        *dry = Some(now);
                        println!("{:>7.2} s  the parts are empty", w.at(now));
                    }
                    (0, Some(_)) => {}
                    _ => *dry = None,
                }
            }
            if p.k != k {
                println!(
                    "{:>7.2} s  parts in use {}: units per part {:?}, script calls/s per part \
                     {}, {taken} units taken",
                    w.at(now),
                    if k == 0 {
                        p.k.to_string()
                    } else {
                        format!("{k} -> {}", p.k)
                    },
                    p.units,
                    rates.map_or("-".to_string(), |r| format!("{r:?}"))
                );
                k = p.k;
                w.most.fetch_max(k, Ordering::Relaxed);
                w.changes.lock().unwrap().push((now, k));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `key`'s slot, and the index in `c.masters` of the master serving it.
    fn master_of(c: &Cluster, key: &str) -> (u16, usize) {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut cluster::conn(c.masters[0]))
            .expect("CLUSTER KEYSLOT");
        let i = c
            .slots
            .iter()
            .position(|ranges| serves(ranges, slot))
            .expect("every slot is served");
        (slot, i)
    }

    /// Once the stock is split into all its parts (the last one stocked)
    /// or a third of it is taken, SIGKILLs the master serving part 0's slot,
    /// waits for its replica's promotion and, in durable mode, restarts the
    /// old master as the new one's replica (a durable take needs one).
    fn fail_over(c: &mut Cluster, w: &Watch, children: &mut [Child], durable: bool) {
        let key = part_key(0);
        let (slot, i) = master_of(c, &key);
        let third = (w.initial / 3) as i64;
        let until = Instant::now() + Duration::from_secs(60);
        // Relaxed: the watcher's tallies, read for a decision only.
        while !w.split_done.load(Ordering::Relaxed) && w.taken.load(Ordering::Relaxed) < third {
            if Instant::now() > until
                || children
                    .iter_mut()
                    .any(|ch| ch.try_wait().is_ok_and(|s| s.is_some()))
            {
                println!(
                    "note: the sale ended (or 60 s passed) before the stock split into all \
                     {PARTS} parts or lost a third: killing now"
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let old = c.masters[i];
        let t = Instant::now();
        c.kill_master(i);
        println!(
            "{:>7.2} s  killed master {old} (SIGKILL), which serves part 0 ({key}, slot {slot}); \
             parts in use up to {} so far, units per part {:?}, {} units taken",
            w.at(t),
            w.most.load(Ordering::Relaxed),
            w.units.lock().unwrap(),
            w.taken.load(Ordering::Relaxed)
        );
        let new = c.wait_promotion(i);
        let now = Instant::now();
        println!(
            "{:>7.2} s  failover: replica {new} took over master {old}'s slots, cluster_state:ok \
             on every node, {:.2} s after the kill",
            w.at(now),
            (now - t).as_secs_f64()
        );
        if durable {
            c.restart_as_replica(i, old);
            let now = Instant::now();
            println!(
                "{:>7.2} s  node {old} back as {new}'s replica, in sync, {:.2} s after the kill \
                 (until then part 0 refused durable takes)",
                w.at(now),
                (now - t).as_secs_f64()
            );
        }
    }

    /// Each worker's `sold N` (None if it printed none), in order, and
    /// whether every worker succeeded (prints their notes).
    fn collect(children: Vec<Child>) -> (Vec<Option<u64>>, bool) {
        let mut ok = true;
        let mut sold = Vec::new();
        for (p, mut child) in children.into_iter().enumerate() {
            let mut n = None;
            for line in BufReader::new(child.stdout.take().unwrap()).lines() {
                let line = line.unwrap();
                if let Some(note) = line.strip_prefix("# ") {
                    println!("process {p}: {note}");
                } else if let Some(v) = line.strip_prefix("sold ") {
                    n = v.parse::<u64>().ok();
                }
            }
            if !child.wait().unwrap().success() || n.is_none() {
                println!("process {p} failed");
                ok = false;
            }
            sold.push(n);
        }
        (sold, ok)
    }

    /// The selling processes: this binary with `--worker-cluster` and the
    /// run's settings.
    fn spawn_sellers(args: &Args, urls: &[String]) -> Vec<Child> {
        let exe = std::env::current_exe().unwrap();
        let joined = urls.join(",");
        (0..args.processes)
            .map(|p| {
                let mut cmd = Command::new(&exe);
                cmd.args(["--worker-cluster", &joined])
                    .args(["--seed", &(p + 1).to_string()])
                    .args(["--inventory", &args.inventory.to_string()])
                    .args(["--chunk", &args.chunk.to_string()])
                    .args(["--threads", &args.threads.to_string()])
                    .args(["--split-above", &args.split_above.to_string()])
                    .args(["--merge-below", &args.merge_below.to_string()])
                    .args(["--rate", &args.rate.to_string()])
                    .args(["--linger-ms", &args.linger_ms.to_string()])
                    .stdout(Stdio::piped());
                if args.durable {
                    cmd.arg("--durable");
                }
                cmd.spawn().expect("spawn worker")
            })
            .collect()
    }

    /// The cluster inventory run: sets the stock once, runs the sellers
    /// while watching the parts, checks sold == initial − remaining and
    /// sold ≤ initial. Returns the exit code.
    pub(super) fn coordinator(args: &Args) -> i32 {
        // Its drop kills every redis-server by PID: before the verdict,
        // FAIL included, or while a panic unwinds.
        let mut c = Cluster::started();
        let urls = c.urls();
        println!(
            "redis cluster: masters {:?}, replicas {:?}; {} processes x {} threads selling {} \
             units (chunk {}) from one stock split over up to {PARTS} parts (split above {} \
             script calls/s on a part, merge below {} in all); {}",
            c.masters,
            c.replicas.iter().flatten().collect::<Vec<_>>(),
            args.processes,
            args.threads,
            args.inventory,
            args.chunk,
            args.split_above,
            args.merge_below,
            if args.durable {
                "durable: a take waits for a replica"
            } else {
                "not durable: a failover can undo takes a replica had not got"
            }
        );
        let homes: Vec<String> = (0..PARTS)
            .map(|j| format!("part {j} on {}", c.masters[master_of(&c, &part_key(j)).1]))
            .collect();
        println!("the stock's parts: {}", homes.join(", "));
        // The coordinator sets the stock, once; the workers only sell. Its
        // stock is dropped at once: the parts follow the workers' load only.
        {
            let stock = FleetStock::cluster(&urls, PREFIX, STOCK, split(args), config(args))
                .expect("node urls");
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                match stock.init(args.inventory) {
                    Ok(_) => break,
                    Err(e) if Instant::now() > until => {
                        println!("cannot set the stock: {e}");
                        return 1;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        let w = Watch {
            start: Instant::now(),
            initial: args.inventory,
            most: AtomicUsize::new(1),
            split_done: AtomicBool::new(false),
            units: Mutex::new(Vec::new()),
            taken: AtomicI64::new(-1),
            peak: AtomicU64::new(0),
            changes: Mutex::new(Vec::new()),
            dry: Mutex::new(None),
            done: AtomicBool::new(false),
        };
        let (sold, ok, ended) = std::thread::scope(|s| {
            let watcher = s.spawn(|| watch(&urls, &w));
            let mut children = spawn_sellers(args, &urls);
            if args.kill_master {
                fail_over(&mut c, &w, &mut children, args.durable);
            }
            let (sold, ok) = collect(children);
            let ended = Instant::now();
            // Relaxed: the watcher only polls it.
            w.done.store(true, Ordering::Relaxed);
            watcher.join().unwrap();
            (sold, ok, ended)
        });
        let total: u64 = sold.iter().flatten().sum();
        for (p, n) in sold.iter().enumerate() {
            match n {
                Some(n) => println!("process {p}: sold {n}"),
                None => println!("process {p}: sold ? (no count)"),
            }
        }
        let (parts, ok) = match read_settled(&urls) {
            Ok(p) => (p, ok),
            Err(e) => {
                println!("cannot read the parts after the run: {e}");
                let empty = Parts {
                    k: 0,
                    units: vec![0; PARTS],
                    calls: vec![0; PARTS],
                };
                (empty, false)
            }
        };
        drop(c);
        let remaining: i64 = parts.units.iter().sum();
        println!(
            "sold {total} in all; {remaining} left in the parts {:?}; initial {}",
            parts.units, args.inventory
        );
        let dry = *w.dry.lock().unwrap();
        let changes = w.changes.lock().unwrap();
        let back_to_one = changes
            .last()
            .filter(|&&(_, k)| k == 1 && changes.len() > 1)
            .map(|&(t, _)| t);
        println!(
            "parts in use: {} at most (the busiest part ran up to {} script calls/s; split above \
             {}); {} at the end{}{}",
            w.most.load(Ordering::Relaxed),
            w.peak.load(Ordering::Relaxed),
            args.split_above,
            parts.k,
            match dry {
                Some(d) => format!(
                    ", read {:.1} s after the parts ran dry, once every worker ended",
                    (Instant::now() - d).as_secs_f64()
                ),
                None => ", the parts never ran dry".to_string(),
            },
            match (back_to_one, dry) {
                (Some(t), Some(d)) if t >= d => format!(
                    "; back to 1 part {:.1} s after they ran dry, {:.1} s before the last worker \
                     ended",
                    (t - d).as_secs_f64(),
                    ended.saturating_duration_since(t).as_secs_f64()
                ),
                (Some(t), _) => format!("; back to 1 part at {:.2} s", w.at(t)),
                (None, _) => String::new(),
            }
        );
        let exact = remaining >= 0
            && i128::from(total) == i128::from(args.inventory) - i128::from(remaining);
        let never_oversold = total <= args.inventory;
        let verdict = ok && exact && never_oversold;
        println!(
            "verdict: {} (sold == initial - remaining{}, never oversold{})",
            if verdict { "OK" } else { "FAIL" },
            if exact { "" } else { " does NOT hold" },
            if never_oversold {
                String::new()
            } else {
                format!(": oversold by {}", total - args.inventory)
            }
        );
        if verdict {
            0
        } else {
            1
        }
    }
}
