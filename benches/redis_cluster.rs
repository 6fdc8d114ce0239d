//! Folds over a Redis Cluster against one server, in the same run: how
//! much Redis CPU a key-delta costs through `RedisClusterSink` on a local
//! 3-master cluster (each master with a replica) and through `RedisSink`
//! on one server (alone, and with a replica), and how the cluster's work
//! splits over its masters; and a cluster `FleetReader` read served from
//! its cache against one `Instant::now()`.
//!
//! ```sh
//! cargo bench --bench redis_cluster --features redis-cluster
//! ```
//!
//! Starts its own redis-server and its own six-node cluster (free ports,
//! temporary directories, AOF everysec). Each figure is the median of
//! `SHARDCOUNT_REPS` (default 5) repetitions, single server and cluster
//! alternating within each.

use shardcount::export::redis::RedisSink;
use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
use shardcount::export::{ExportConfig, Exporter, Sink};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/cached_read.rs"]
mod cached_read;
#[path = "common/redis_server.rs"]
mod redis_server;
use redis_server::{median, reps, server_cpu, start_server, Keys};

#[path = "../tests/common/cluster.rs"]
mod cluster;

const KEYS: usize = 20_000;
const ROUNDS: usize = 5;

/// Key-deltas per second one exporter folds through `sink`: `KEYS` keys
/// changed per round, `ROUNDS` rounds, each delivered by a flush. `rep`
/// keeps repetitions' keys apart.
fn delivery(sink: impl Sink, rep: usize, config: &ExportConfig) -> f64 {
    let src = Arc::new(Keys {
        names: (0..KEYS).map(|i| format!("r{rep}_{i}")).collect(),
        values: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
    });
    let exporter = Exporter::with_config(
        sink,
        ExportConfig {
            interval: Duration::from_secs(3600),
            ..config.clone()
        },
    );
    exporter.register_source(Arc::clone(&src));
    let t = Instant::now();
    for _ in 0..ROUNDS {
        src.values
            .iter()
            .for_each(|v| _ = v.fetch_add(1, Ordering::Relaxed));
        exporter
            .flush(Instant::now() + Duration::from_secs(60))
            .unwrap();
    }
    (KEYS * ROUNDS) as f64 / t.elapsed().as_secs_f64()
}

/// A cluster node's URL.
fn node(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (_server, url) = start_server("bench-cluster");
    // The same server with a replica, as a cluster's masters have.
    let (_paired, paired_url) = start_server("bench-cluster-paired");
    let paired_port: u16 = paired_url.rsplit(':').next().unwrap().parse().unwrap();
    let (_replica, replica_url) = start_server("bench-cluster-replica");
    let replica_port: u16 = replica_url.rsplit(':').next().unwrap().parse().unwrap();
    let () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(paired_port)
        .query(&mut cluster::conn(replica_port))
        .unwrap();
    while !redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut cluster::conn(replica_port))
        .unwrap()
        .contains("master_link_status:up")
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = cluster::Cluster::started();
    let buckets = std::env::var("SHARDCOUNT_BUCKETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let keys = ClusterKeys::new("b:", buckets);
    let reps = reps();
    let mut config = ExportConfig::default();
    if let Some(b) = std::env::var("SHARDCOUNT_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        config.batch_keys = b;
    }
    println!(
        "one server vs a 3-master cluster (loopback, AOF everysec), {KEYS} keys x {ROUNDS} rounds, \
         1 exporter, batch {} keys x pipeline {}, {buckets} buckets; median of {reps}",
        config.batch_keys,
        config.pipeline
    );
    let deltas = (KEYS * ROUNDS) as f64;
    let (mut rate1, mut cpu1, mut rate3, mut cpu3, mut ratio) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut rate2, mut cpu2, mut ratio2) = (Vec::new(), Vec::new(), Vec::new());
    // The same masters without replicas: the cluster's own cost, apart
    // from feeding replicas.
    let bare = cluster::Cluster::started_bare();
    let (mut rate0, mut cpu0, mut ratio0) = (Vec::new(), Vec::new(), Vec::new());
    let mut per_master = vec![Vec::new(); 3];
    let mut replicas_us = Vec::new();
    for rep in 0..reps {
        let before = server_cpu(&url);
        rate1.push(delivery(RedisSink::new(&url, "b:").unwrap(), rep, &config));
        let one = (server_cpu(&url) - before) * 1e6 / deltas;
        cpu1.push(one);

        let before = server_cpu(&paired_url);
        rate2.push(delivery(
            RedisSink::new(&paired_url, "b:").unwrap(),
            rep,
            &config,
        ));
        let two = (server_cpu(&paired_url) - before) * 1e6 / deltas;
        cpu2.push(two);

        let replica_ports: Vec<u16> = c.replicas.iter().map(|r| r.unwrap()).collect();
        let before: Vec<f64> = c.masters.iter().map(|&p| server_cpu(&node(p))).collect();
        let before_r: f64 = replica_ports.iter().map(|&p| server_cpu(&node(p))).sum();
        let sink = RedisClusterSink::new(&c.urls(), keys.clone()).unwrap();
        rate3.push(delivery(sink, rep, &config));
        let used: Vec<f64> = c
            .masters
            .iter()
            .zip(&before)
            .map(|(&p, b)| (server_cpu(&node(p)) - b) * 1e6 / deltas)
            .collect();
        let all: f64 = used.iter().sum();
        for (m, u) in per_master.iter_mut().zip(&used) {
            m.push(u / all);
        }
        replicas_us.push(
            (replica_ports
                .iter()
                .map(|&p| server_cpu(&node(p)))
                .sum::<f64>()
                - before_r)
                * 1e6
                / deltas,
        );
        cpu3.push(all);

        let before: Vec<f64> = bare.masters.iter().map(|&p| server_cpu(&node(p))).collect();
        let sink = RedisClusterSink::new(&bare.urls(), keys.clone()).unwrap();
        rate0.push(delivery(sink, rep, &config));
        let used: f64 = bare
            .masters
            .iter()
            .zip(&before)
            .map(|(&p, b)| (server_cpu(&node(p)) - b) * 1e6 / deltas)
            .sum();
        cpu0.push(used);
        ratio0.push(used / one);
        ratio.push(all / one);
        ratio2.push(all / two);
    }
    println!(
        "one server: {:.0}k key-deltas/s, server CPU {:.2} us per key-delta",
        median(rate1) / 1e3,
        median(cpu1)
    );
    println!(
        "one server with a replica: {:.0}k key-deltas/s, server CPU {:.2} us per key-delta",
        median(rate2) / 1e3,
        median(cpu2)
    );
    println!(
        "cluster:    {:.0}k key-deltas/s, masters' CPU {:.2} us per key-delta in all \
         ({:.2}x one server's, {:.2}x one server's with a replica; per-repetition \
         medians), replicas' {:.2} us",
        median(rate3) / 1e3,
        median(cpu3),
        median(ratio),
        median(ratio2),
        median(replicas_us)
    );
    println!(
        "cluster without replicas: {:.0}k key-deltas/s, masters' CPU {:.2} us per key-delta \
         ({:.2}x one server's)",
        median(rate0) / 1e3,
        median(cpu0),
        median(ratio0)
    );
    for (i, m) in per_master.into_iter().enumerate() {
        println!(
            "  master {i}: {:.1}% of the masters' CPU",
            median(m) * 100.0
        );
    }

    // A cached read of 100 keys over the 3 masters.
    let reader =
        shardcount::fleet::FleetReader::cluster(&c.urls(), keys, Duration::from_secs(3600))
            .unwrap();
    let set = reader.keys((0..100).map(|i| format!("r0_{i}")));
    assert_eq!(set.total().unwrap().value, 100 * ROUNDS as i64);
    let (read, clock, ratio) = cached_read::cached_read_vs_clock(&set, reps);
    assert_eq!(
        reader.round_trips(),
        1,
        "every timed read came from the cache"
    );
    println!(
        "cached cluster read (100 keys, 3 masters) {read:.1} ns, Instant::now() {clock:.1} ns; \
         ratio {ratio:.2}x (goal <= 2x)"
    );
}
