//! A real Redis Cluster (issue 46's first building block): keys spread over
//! the masters, hash-tagged keys fold in one script call, and a write
//! acknowledged by a replica survives its master's death. Each test starts
//! its own cluster (tests/common/cluster.rs) and drives it with the `redis`
//! crate's own cluster client.

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{conn, Cluster};
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{ErrorKind, ServerErrorKind};

fn client(c: &Cluster) -> ClusterConnection {
    ClusterClient::new(c.urls())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn slot(port: u16, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut conn(port))
        .unwrap()
}

fn dbsize(port: u16) -> u64 {
    redis::cmd("DBSIZE").query(&mut conn(port)).unwrap()
}

/// Writes `k<i>` = `i + 1` for `i < n` through the cluster client.
fn write_keys(c: &mut ClusterConnection, n: i64) {
    for i in 0..n {
        let v: i64 = redis::cmd("INCRBY")
            .arg(format!("k{i}"))
            .arg(i + 1)
            .query(c)
            .unwrap();
        assert_eq!(v, i + 1, "k{i} existed before");
    }
}

fn read_keys(c: &mut ClusterConnection, n: i64) {
    for i in 0..n {
        let v: Option<i64> = redis::cmd("GET")
            .arg(format!("k{i}"))
            .query(c)
            .unwrap_or_else(|e| panic!("GET k{i}: {e}"));
        assert_eq!(v, Some(i + 1), "k{i}");
    }
}

#[test]
fn keys_spread_over_the_masters() {
    let cluster = Cluster::started();
    let mut c = client(&cluster);
    write_keys(&mut c, 1000);
    read_keys(&mut c, 1000);

    let sizes: Vec<u64> = cluster.masters.iter().map(|&p| dbsize(p)).collect();
    assert_eq!(sizes.iter().sum::<u64>(), 1000, "per master: {sizes:?}");
    for (port, n) in cluster.masters.iter().zip(&sizes) {
        assert!(
            (200..=470).contains(n),
            "master {port} holds {n} of 1000 keys (all: {sizes:?}): not spread"
        );
    }
}

#[test]
fn hash_tagged_keys_share_a_master_and_a_script() {
    let cluster = Cluster::started();
    let mut c = client(&cluster);
    let (a, b) = ("{fleet:0}:a", "{fleet:0}:b");
    let m = cluster.masters[0];
    assert_eq!(slot(m, a), slot(m, b));
    let _: () = redis::cmd("SET").arg(a).arg(5).query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg(b).arg(7).query(&mut c).unwrap();

    // Both keys on exactly one master, nothing on the others.
    let holding: Vec<u64> = cluster.masters.iter().map(|&p| dbsize(p)).collect();
    let mut sorted = holding.clone();
    sorted.sort();
    assert_eq!(sorted, [0, 0, 2], "per master: {holding:?}");

    // One EVAL over both keys, routed by the client to their slot.
    let fold = "return redis.call('INCRBY', KEYS[1], ARGV[1]) \
                + redis.call('INCRBY', KEYS[2], ARGV[1])";
    let sum: i64 = redis::cmd("EVAL")
        .arg(fold)
        .arg(2)
        .arg(a)
        .arg(b)
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(sum, 6 + 8);

    // Keys in different slots: the server refuses before the script runs.
    let (x, y) = ("fleet:x", "fleet:y");
    assert_ne!(slot(m, x), slot(m, y));
    let err = redis::cmd("EVAL")
        .arg(fold)
        .arg(2)
        .arg(x)
        .arg(y)
        .arg(1)
        .query::<i64>(&mut c)
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::CrossSlot),
        "{err}"
    );
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let made: u64 = redis::cmd("EXISTS").arg(x).query(&mut c).unwrap();
    let made_y: u64 = redis::cmd("EXISTS").arg(y).query(&mut c).unwrap();
    assert_eq!((made, made_y), (0, 0), "the script ran anyway");
}

/// A write on `port` itself, then `WAIT 1`: the replica has acknowledged
/// everything the master took before it (one ordered stream).
fn replicated(port: u16) -> i64 {
    let mut m = conn(port);
    // A key this master owns: the others answer MOVED.
    (0..)
        .map(|n| format!("wait:{n}"))
        .find(|k| redis::cmd("INCR").arg(k).query::<i64>(&mut m).is_ok())
        .unwrap();
    redis::cmd("WAIT").arg(1).arg(1000).query(&mut m).unwrap()
}

#[test]
fn acknowledged_writes_survive_a_killed_master() {
    let mut cluster = Cluster::started();
    let mut c = client(&cluster);
    write_keys(&mut c, 300);
    for &p in &cluster.masters {
        assert_eq!(
            replicated(p),
            1,
            "master {p}: WAIT did not reach its replica"
        );
    }

    let old = cluster.masters[0];
    cluster.kill_master(0);
    let new = cluster.wait_promotion(0);
    assert_ne!(old, new);
    assert!(dbsize(new) > 0, "the promoted replica holds no keys");

    // A client that connects now: redis 1.2.2's sync ClusterConnection
    // opened before the kill keeps routing the dead master's slots to its
    // address (connection refused, no slot refresh), so the fleet will
    // need to rebuild its connection on such errors.
    read_keys(&mut client(&cluster), 300);
}
