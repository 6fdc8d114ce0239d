//! `RedisClusterSink` against a real Redis Cluster (issue 46): four
//! exporters fold the same keys while a master is killed (its replica
//! frozen first) and promoted, and one bucket is rolled back to an earlier
//! state, as a failover to a lagging replica leaves it; every total comes
//! out exact, and the keys spread over the masters.

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{conn, Cluster};
use shardcount::export::redis_cluster::{ClusterKeys, Durability, RedisClusterSink, Repairs};
use shardcount::export::{ExportConfig, Exporter};
use shardcount::fleet::FleetReader;
use shardcount::Counter;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: usize = 2_000;
const EXPORTERS: usize = 4;
const BUCKETS: usize = 16;

/// What round `r` adds to key `i`.
fn weight(i: usize) -> u64 {
    1 + (i % 5) as u64
}

fn name(i: usize) -> String {
    format!("k{i}")
}

/// Reads every key's total through its bucket's master, a `MGET` per
/// bucket (one slot each).
fn totals(cluster: &Cluster, keys: &ClusterKeys) -> Vec<Option<u64>> {
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut c = client.get_connection().unwrap();
    let mut out = vec![None; KEYS];
    for b in 0..keys.buckets() {
        let ids: Vec<usize> = (0..KEYS)
            .filter(|&i| keys.bucket_of(&name(i)) == b)
            .collect();
        let names: Vec<String> = ids.iter().map(|&i| keys.key(&name(i))).collect();
        let vals: Vec<Option<u64>> = redis::cmd("MGET").arg(&names).query(&mut c).unwrap();
        for (i, v) in ids.into_iter().zip(vals) {
            out[i] = v;
        }
    }
    out
}

fn dbsize(port: u16) -> u64 {
    redis::cmd("DBSIZE").query(&mut conn(port)).unwrap()
}

/// A bucket's keys and writers hash as they are now.
struct Snapshot {
    names: Vec<String>,
    values: Vec<Option<String>>,
    writers: Vec<(String, String)>,
}

fn snapshot(c: &mut redis::cluster::ClusterConnection, keys: &ClusterKeys, b: usize) -> Snapshot {
    let names: Vec<String> = (0..KEYS)
        .map(name)
        .filter(|n| keys.bucket_of(n) == b)
        .map(|n| keys.key(&n))
        .collect();
    // One script, so the keys and the record are read at one instant.
    let read = "local w = redis.call('HGETALL', KEYS[1]) \
                return {w, redis.call('MGET', unpack(KEYS, 2))}";
    let (writers, values): (Vec<(String, String)>, Vec<Option<String>>) = redis::cmd("EVAL")
        .arg(read)
        .arg(names.len() + 1)
        .arg(keys.writers_key(b))
        .arg(&names)
        .query(c)
        .unwrap();
    Snapshot {
        names,
        values,
        writers,
    }
}

/// Puts a bucket back as `s` found it, in one script: what a failover to
/// a replica that lagged since then does to it.
fn roll_back(
    c: &mut redis::cluster::ClusterConnection,
    keys: &ClusterKeys,
    b: usize,
    s: &Snapshot,
) {
    let restore = "redis.call('DEL', KEYS[1]) \
        local n = tonumber(ARGV[1]) \
        for i = 1, n do redis.call('HSET', KEYS[1], ARGV[2 * i], ARGV[2 * i + 1]) end \
        for i = 2, #KEYS do \
          local v = ARGV[2 * n + i] \
          if v == '' then redis.call('DEL', KEYS[i]) else redis.call('SET', KEYS[i], v) end \
        end";
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(restore)
        .arg(s.names.len() + 1)
        .arg(keys.writers_key(b))
        .arg(&s.names)
        .arg(s.writers.len());
    for (f, v) in &s.writers {
        cmd.arg(f).arg(v);
    }
    for v in &s.values {
        cmd.arg(v.as_deref().unwrap_or(""));
    }
    let () = cmd.query(c).unwrap();
}

/// Four exporters, each with its own counters for the same keys and its
/// own sink, and a thread adding `weight(i)` to every key of every
/// exporter each round.
struct Fleet {
    keys: ClusterKeys,
    repairs: Vec<Repairs>,
    exporters: Vec<Exporter>,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    adder: Option<std::thread::JoinHandle<()>>,
}

impl Fleet {
    fn started(cluster: &Cluster, durability: Durability) -> Fleet {
        let keys = ClusterKeys::new("fold:", BUCKETS);
        let sinks: Vec<RedisClusterSink> = (0..EXPORTERS)
            .map(|_| {
                RedisClusterSink::new(&cluster.urls(), keys.clone())
                    .unwrap()
                    .with_timeout(Duration::from_millis(500))
                    .with_durability(durability)
            })
            .collect();
        let repairs = sinks.iter().map(RedisClusterSink::repairs).collect();
        let counters: Vec<Vec<Arc<Counter>>> = (0..EXPORTERS)
            .map(|_| (0..KEYS).map(|_| Arc::new(Counter::new())).collect())
            .collect();
        let exporters = sinks
            .into_iter()
            .zip(&counters)
            .map(|(sink, cs)| {
                let config = ExportConfig {
                    interval: Duration::from_millis(20),
                    max_backoff: Duration::from_millis(200),
                    ..ExportConfig::default()
                };
                let e = Exporter::with_config(sink, config);
                for (i, c) in cs.iter().enumerate() {
                    e.register(&name(i), Arc::clone(c));
                }
                e
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let adder = {
            let (stop, rounds) = (stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for cs in &counters {
                        for (i, c) in cs.iter().enumerate() {
                            c.add(weight(i));
                        }
                    }
                    rounds.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Fleet {
            keys,
            repairs,
            exporters,
            stop,
            rounds,
            adder: Some(adder),
        }
    }

    /// Stops adding, flushes every exporter, and checks every key's total
    /// in the cluster. Returns the sinks' (resent, lost).
    fn finish(mut self, cluster: &Cluster) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.adder.take().unwrap().join().unwrap();
        let rounds = self.rounds.load(Ordering::Relaxed);
        for (n, e) in self.exporters.iter().enumerate() {
            if let Err(err) = e.flush(Instant::now() + Duration::from_secs(30)) {
                panic!("exporter {n}: {err} ({:?})", e.stats());
            }
            assert_eq!(e.stats().lost, 0, "exporter {n}");
        }
        let got = totals(cluster, &self.keys);
        for (i, v) in got.iter().enumerate() {
            let want = rounds * weight(i) * EXPORTERS as u64;
            assert_eq!(*v, Some(want), "key {} after {rounds} rounds", name(i));
        }
        self.repairs
            .iter()
            .fold((0, 0), |(r, l), s| (r + s.resent(), l + s.lost()))
    }
}

/// Each master holds a third of the fleet's keys, give or take a tenth.
fn assert_spread(cluster: &Cluster) {
    let sizes: Vec<u64> = cluster.masters.iter().map(|&p| dbsize(p)).collect();
    let total: u64 = sizes.iter().sum();
    assert_eq!(total, (KEYS + BUCKETS) as u64);
    for (&p, &n) in cluster.masters.iter().zip(&sizes) {
        let share = n as f64 / total as f64;
        assert!(
            (0.2333..=0.4333).contains(&share),
            "master {p} holds {:.1}% of the keys ({sizes:?})",
            share * 100.0
        );
    }
}

/// The fleet folds while master 0 dies (its replica frozen first, so it
/// may miss the master's last writes) and, if `rollback`, one bucket on
/// another master loses its last 200 ms; returns the sinks' (resent,
/// lost).
fn fold_through_a_failover(durability: Durability, rollback: bool) -> (u64, u64) {
    let mut cluster = Cluster::started();
    let fleet = Fleet::started(&cluster, durability);
    let keys = fleet.keys.clone();
    for b in 0..BUCKETS {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(keys.writers_key(b))
            .query(&mut conn(cluster.masters[0]))
            .unwrap();
        assert_eq!(
            slot,
            keys.slot(b),
            "bucket {b}: the server hashes its tag elsewhere"
        );
    }

    std::thread::sleep(Duration::from_millis(300));
    if rollback {
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        let mut c = client.get_connection().unwrap();
        let b = BUCKETS / 2;
        let before = snapshot(&mut c, &keys, b);
        assert!(!before.writers.is_empty(), "bucket {b} has no batch yet");
        std::thread::sleep(Duration::from_millis(200));
        roll_back(&mut c, &keys, b, &before);
    }
    // A cached read of every key, kept while a master is down.
    let reader = FleetReader::cluster(&cluster.urls(), keys.clone(), Duration::from_millis(50))
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    let watched = reader.keys((0..KEYS).map(name));
    let seen = watched.total().unwrap();
    assert!(seen.value > 0);
    // Freeze master 0's replica, let the master confirm writes, then kill
    // it: the promoted replica may lack them.
    cluster.signal_replica(0, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(400));
    if let Durability::Replicas { .. } = durability {
        // Nothing master 0 took since the freeze is durable: its
        // deliveries fail, and say why.
        let why: Vec<String> = fleet
            .exporters
            .iter()
            .filter_map(|e| e.stats().last_error)
            .collect();
        assert!(
            why.iter().any(|w| w.contains("not yet durable")),
            "deliveries went on without the frozen replica: {why:?}"
        );
    }
    let old = cluster.masters[0];
    cluster.kill_master(0);
    std::thread::sleep(Duration::from_millis(100));
    // Past the TTL with a master gone: the last values, and their age.
    let stale = watched.total().unwrap();
    assert!(stale.value >= seen.value);
    assert!(stale.age >= Duration::from_millis(50), "{:?}", stale.age);
    cluster.signal_replica(0, libc::SIGCONT);
    cluster.wait_promotion(0);
    if let Durability::Replicas { .. } = durability {
        // The promoted master needs a replica before anything is durable.
        cluster.restart_as_replica(0, old);
    }
    std::thread::sleep(Duration::from_millis(300));
    let r = fleet.finish(&cluster);
    assert_spread(&cluster);
    r
}

#[test]
fn writes_a_failover_lost_are_sent_again_and_totals_stay_exact() {
    let (resent, lost) = fold_through_a_failover(Durability::Master, true);
    assert_eq!(lost, 0);
    assert!(
        resent > 0,
        "the rolled-back bucket lost nothing: the test proved nothing"
    );
}

#[test]
fn durable_folds_lose_nothing_confirmed_in_a_failover() {
    let (resent, lost) = fold_through_a_failover(
        Durability::Replicas {
            replicas: 1,
            timeout: Duration::from_millis(100),
        },
        false,
    );
    assert_eq!((resent, lost), (0, 0), "a confirmed part was lost");
}

#[test]
fn folds_follow_redirects_while_slots_migrate() {
    let cluster = Cluster::started();
    let fleet = Fleet::started(&cluster, Durability::Master);
    std::thread::sleep(Duration::from_millis(200));
    // A third of master 0's slots, with bucket 0's, to master 1 while the
    // fleet folds: MOVED, ASK and TRYAGAIN meanwhile.
    let slot0 = fleet.keys.slot(0);
    let moved = |port: u16| -> u64 {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot0)
            .query(&mut conn(port))
            .unwrap()
    };
    assert!(moved(cluster.masters[0]) > 0);
    let out = cluster.reshard(0, 1, 1800).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "reshard failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(moved(cluster.masters[1]) > 0, "bucket 0 did not move");
    std::thread::sleep(Duration::from_millis(200));
    let rounds = fleet.rounds.clone();
    assert_eq!(fleet.finish(&cluster), (0, 0));

    // The totals through a reader: a fixed set (one script per bucket, one
    // pipeline) and every key (a SCAN on every master).
    let rounds = rounds.load(Ordering::Relaxed);
    let keys = ClusterKeys::new("fold:", BUCKETS);
    let reader = FleetReader::cluster(&cluster.urls(), keys, Duration::from_secs(60)).unwrap();
    let want = |i: usize| (rounds * weight(i) * EXPORTERS as u64) as i64;
    let set = reader.keys((0..KEYS).map(name));
    assert_eq!(set.total().unwrap().value, (0..KEYS).map(want).sum::<i64>());
    assert_eq!(set.get(7).unwrap().unwrap().value, want(7));
    let (all, _) = reader.all().values().unwrap();
    assert_eq!(all.len(), KEYS, "every counter key, no writers hash");
    for (k, v) in &all {
        let i: usize = k[1..].parse().unwrap();
        assert_eq!(*v, want(i), "{k}");
    }
    assert_eq!(reader.round_trips(), 2, "one per refresh of each set");
}
