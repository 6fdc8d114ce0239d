//! `FleetStock::cluster` against a real Redis Cluster (issue 46): five
//! stocks (a process each, in effect: their own tokens, leases and idle
//! workers) sell 600,000 units from a stock that splits into 4 parts under
//! the load, while the master of part 0 is killed and its replica
//! promoted. In durable mode nothing is oversold or lost: every unit is
//! sold exactly once; and the split merges back to one part once the
//! selling stops.

#[path = "common/cluster.rs"]
mod cluster;

use cluster::{conn, Cluster};
use shardcount::export::redis_cluster::Durability;
use shardcount::fleet::{FleetError, FleetStock, FleetStockConfig, StockSplit};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const UNITS: u64 = 600_000;
const STOCKS: usize = 5;
const THREADS: usize = 2;

fn split() -> StockSplit {
    StockSplit {
        parts: 4,
        split_above: 300,
        merge_below: 100,
        durability: Durability::Replicas {
            replicas: 1,
            timeout: Duration::from_millis(200),
        },
    }
}

fn config() -> FleetStockConfig {
    FleetStockConfig {
        chunk: 100,
        idle: Duration::from_millis(200),
        timeout: Duration::from_millis(300),
    }
}

/// The index in `cluster.masters` of the master serving `key`.
fn master_of(cluster: &Cluster, key: &str) -> usize {
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut conn(cluster.masters[0]))
        .unwrap();
    cluster
        .slots
        .iter()
        .position(|ranges| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
        .unwrap()
}

/// The parts in use, as the K key says (absent: 1).
fn parts_key(cluster: &Cluster) -> usize {
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut c = client.get_connection().unwrap();
    let k: Option<usize> = redis::cmd("GET")
        .arg("shop:{sku#0}__parts")
        .query(&mut c)
        .unwrap();
    k.unwrap_or(1)
}

#[test]
fn a_split_stock_sells_every_unit_once_through_a_killed_master() {
    let mut cluster = Cluster::started();
    let stocks: Vec<Arc<FleetStock>> = (0..STOCKS)
        .map(|_| {
            Arc::new(
                FleetStock::cluster(&cluster.urls(), "shop:", "sku", split(), config()).unwrap(),
            )
        })
        .collect();
    assert!(stocks[0].init(UNITS).unwrap());
    assert!(!stocks[1].init(UNITS).unwrap(), "init sets the stock once");

    let sold = Arc::new(AtomicU64::new(0));
    let redis_errors = Arc::new(AtomicU64::new(0));
    let most_parts = Arc::new(AtomicUsize::new(1));
    let done = Arc::new(AtomicBool::new(false));
    let sellers: Vec<_> = (0..STOCKS * THREADS)
        .map(|t| {
            let (stock, sold, errors) = (
                stocks[t / THREADS].clone(),
                sold.clone(),
                redis_errors.clone(),
            );
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    assert!(Instant::now() < deadline, "selling did not finish");
                    match stock.try_sub(1) {
                        Ok(()) => {
                            // Paced (160k sales a second in all), so the
                            // split and the failover happen mid-run.
                            if sold.fetch_add(1, Ordering::Relaxed) % 16 == 0 {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                        }
                        // Refused: stop only once every part is empty (a
                        // refusal while other leases hold units is allowed).
                        Err(FleetError::Insufficient(_)) => {
                            if stock.remaining().is_ok_and(|r| r == 0) {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(FleetError::Redis(_)) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    // How many parts are in use, and the most units part 3 (made by the
    // second split) held.
    let most_in_last = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stock, most, stocked, done) = (
            stocks[0].clone(),
            most_parts.clone(),
            most_in_last.clone(),
            done.clone(),
        );
        let urls = cluster.urls();
        std::thread::spawn(move || {
            // A new connection after an error: the sync cluster client
            // keeps a killed master's address.
            let mut c = None;
            while !done.load(Ordering::Relaxed) {
                most.fetch_max(stock.parts_in_use(), Ordering::Relaxed);
                if c.is_none() {
                    c = redis::cluster::ClusterClient::new(urls.clone())
                        .and_then(|client| client.get_connection())
                        .ok();
                }
                let last: Option<u64> = match c.as_mut().map(|c| {
                    redis::cmd("GET")
                        .arg("shop:{sku#3}")
                        .query::<Option<u64>>(c)
                }) {
                    Some(Ok(v)) => v,
                    _ => {
                        c = None;
                        None
                    }
                };
                stocked.fetch_max(last.unwrap_or(0), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    // Once the load split the stock into 4 parts and the last one holds
    // units, freeze the replica of part 0's master (its takes cannot be
    // confirmed meanwhile), then kill the master and promote the replica.
    let until = Instant::now() + Duration::from_secs(20);
    while most_parts.load(Ordering::Relaxed) < 4 || most_in_last.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < until && sold.load(Ordering::Relaxed) < UNITS / 2,
            "half the stock sold before the load split it into 4 parts \
             (at most {} parts, at most {} units in the last)",
            most_parts.load(Ordering::Relaxed),
            most_in_last.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let i = master_of(&cluster, "shop:{sku#0}");
    let old = cluster.masters[i];
    cluster.signal_replica(i, libc::SIGSTOP);
    // Meanwhile a take on that master cannot be confirmed: a stock of one
    // part there fails instead of selling.
    let probe = (0..)
        .map(|n| format!("probe{n}"))
        .find(|n| master_of(&cluster, &format!("shop:{{{n}#0}}")) == i)
        .unwrap();
    let one = StockSplit {
        parts: 1,
        ..split()
    };
    let probe = FleetStock::cluster(&cluster.urls(), "shop:", &probe, one, config()).unwrap();
    assert!(probe.init(10).unwrap());
    match probe.try_sub(1) {
        Err(FleetError::Redis(e)) => assert!(e.starts_with("WAIT"), "{e}"),
        other => panic!("a take on a master whose replica is frozen: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(300));
    cluster.kill_master(i);
    cluster.signal_replica(i, libc::SIGCONT);
    let t = Instant::now();
    cluster.wait_promotion(i);
    // A durable take needs a replica: the old master comes back as one.
    cluster.restart_as_replica(i, old);
    let failover = t.elapsed();

    for s in sellers {
        s.join().unwrap();
    }
    for s in &stocks {
        s.flush().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();

    let sold = sold.load(Ordering::Relaxed);
    assert_eq!(stocks[0].remaining().unwrap(), 0);
    assert_eq!(
        sold,
        UNITS,
        "sold {sold} of {UNITS} (failover {failover:?}, {} Redis errors)",
        redis_errors.load(Ordering::Relaxed)
    );

    // No more load: the parts merge back into one.
    let until = Instant::now() + Duration::from_secs(10);
    while parts_key(&cluster) > 1 || stocks.iter().any(|s| s.parts_in_use() > 1) {
        assert!(
            Instant::now() < until,
            "still {} parts after the load stopped",
            parts_key(&cluster)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
