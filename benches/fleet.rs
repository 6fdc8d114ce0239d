//! The fleet, both ways: a leased `FleetStock::try_sub(1)` against an
//! in-process `Stock` of the same size (2 threads), the Redis round trips
//! per 1,000 units sold, and a `FleetReader` read served from its cache
//! against one `Instant::now()`.
//!
//! ```sh
//! cargo bench --bench fleet --features redis
//! SHARDCOUNT_REPS=1 SHARDCOUNT_FLEET_UNITS=200000 cargo bench --bench fleet --features redis  # short
//! SHARDCOUNT_FLEET_CHUNK=100000 cargo bench --bench fleet --features redis  # a larger lease
//! ```
//!
//! Starts its own redis-server (free port, temporary directory, AOF
//! everysec). Each figure is the median of `SHARDCOUNT_REPS` (default 5)
//! repetitions; subject and reference run back to back, alternating which
//! goes first, and each ratio is the median of the per-repetition ratios.

use shardcount::fleet::{FleetError, FleetReader, FleetStock, FleetStockConfig};
use shardcount::Stock;
use std::sync::Barrier;
use std::time::{Duration, Instant};

#[path = "common/cached_read.rs"]
mod cached_read;
#[path = "common/redis_server.rs"]
mod redis_server;
use cached_read::cached_read_vs_clock;
use redis_server::{median, start_server};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Units per second sold by `threads` threads taking one at a time until
/// `take` fails; each thread times itself from a common barrier, and the
/// slowest sets the rate.
fn drain(threads: usize, units: u64, take: impl Fn() -> bool + Sync) -> f64 {
    let barrier = Barrier::new(threads);
    let (sold, slowest) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let t = Instant::now();
                    let mut n = 0u64;
                    while take() {
                        n += 1;
                    }
                    (n, t.elapsed())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, Duration::ZERO), |(n, d), (m, e)| (n + m, d.max(e)))
    });
    assert_eq!(sold, units, "every unit sold once");
    units as f64 / slowest.as_secs_f64()
}

fn set(url: &str, key: &str, v: u64) {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("SET").arg(key).arg(v).query(&mut c).unwrap();
}

/// Commands a client sent so far (INFO commandstats): script calls, the
/// connects' INFO and SCRIPT LOAD and any handshake, not the commands a
/// script runs inside (commandstats counts those too), nor this
/// function's own INFO calls (each call's INFO is counted by the next).
fn round_trips(url: &str) -> u64 {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()?;
            [
                "evalsha", "eval", "script", "info", "hello", "client", "select", "waitaof", "ping",
            ]
            .contains(&name)
            .then_some(calls)
        })
        .sum()
}

fn leased(url: &str, units: u64, chunk: u64, n: usize) -> f64 {
    let name = format!("bench{n}");
    set(url, &format!("f:{name}"), units);
    let config = FleetStockConfig {
        chunk,
        ..FleetStockConfig::default()
    };
    let stock = FleetStock::new(url, "f:", &name, config).unwrap();
    // Connected before the timing, as in a process that has run a while.
    assert_eq!(stock.remaining().unwrap(), units as i64);
    drain(2, units, || match stock.try_sub(1) {
        Ok(()) => true,
        Err(FleetError::Insufficient(_)) => false,
        Err(e) => panic!("{e}"),
    })
}

fn local(units: u64) -> f64 {
    let stock = Stock::new(units);
    drain(2, units, || stock.try_sub(1).is_ok())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // nothing for `cargo bench -- --list` to see
    }
    let (_server, url) = start_server("fleet-bench");
    let reps = env("SHARDCOUNT_REPS", 5) as usize;
    let units = env("SHARDCOUNT_FLEET_UNITS", 4_000_000);
    println!("fleet bench (loopback redis-server, AOF everysec); median of {reps}");

    // 1. Leased try_sub(1), 2 threads, vs an in-process Stock.
    // The lease size trades refills (a round trip each, while both
    // sellers wait) against units a crash strands.
    let chunk = env("SHARDCOUNT_FLEET_CHUNK", 10_000);
    let (mut fleet, mut own, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..reps {
        let (f, s) = if r % 2 == 0 {
            let f = leased(&url, units, chunk, r);
            (f, local(units))
        } else {
            let s = local(units);
            (leased(&url, units, chunk, r), s)
        };
        fleet.push(f);
        own.push(s);
        ratio.push(f / s);
    }
    println!(
        "try_sub(1), 2 threads, {units} units: FleetStock (chunk {chunk}) {:.1} M/s, \
         Stock {:.1} M/s; ratio {:.2}x (goal >= 0.5x)",
        median(fleet) / 1e6,
        median(own) / 1e6,
        median(ratio)
    );

    // 2. Round trips per 1,000 units sold: every command the stock sent
    // (script calls, the connect's INFO and SCRIPT LOAD, the final failing
    // take), counted by the server.
    for chunk in [100, 1000] {
        let sold = 100_000;
        let before = round_trips(&url);
        leased(&url, sold, chunk, 1000 + chunk as usize);
        // Less the INFO of the `before` call, and the warm-up's GET is
        // not counted (nor is `leased`'s SET).
        let trips = round_trips(&url) - before - 1;
        let per = trips as f64 * 1000.0 / sold as f64;
        println!(
            "round trips per 1,000 units sold, chunk {chunk}: {per:.2} (goal <= {:.2}); \
             {} commands for {sold} units",
            1000.0 / chunk as f64 + 1.0,
            trips
        );
    }

    // 3. A cached fleet read vs one Instant::now().
    set(&url, "r:k", 7);
    let reader = FleetReader::new(&url, "r:", Duration::from_secs(3600)).unwrap();
    let key = reader.key("k");
    assert_eq!(key.total().unwrap().value, 7);
    let (read, clock, ratio) = cached_read_vs_clock(&key, reps);
    assert_eq!(
        reader.round_trips(),
        1,
        "every timed read came from the cache"
    );
    println!(
        "cached fleet read {read:.1} ns, Instant::now() {clock:.1} ns; ratio {ratio:.2}x (goal <= 2x)"
    );
}
