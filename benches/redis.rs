//! Export into Redis: how many counter deltas per second an exporter folds
//! into a local redis-server (AOF everysec), and what a running exporter
//! costs the adding threads.
//!
//! ```sh
//! cargo bench --bench redis --features redis
//! ```
//!
//! Starts its own redis-server (free port, temporary directory). Each
//! figure is the median of `SHARDCOUNT_REPS` (default 5) repetitions; the
//! add-cost sides run alternately in the same repetition and the ratio is
//! the median of the per-repetition ratios.

use shardcount::export::redis::RedisSink;
use shardcount::export::{ExportConfig, Exporter};
use shardcount::RoughCounter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/redis_server.rs"]
mod redis_server;
use redis_server::{median, reps, server_cpu, start_server, Keys};

/// Key-deltas per second folded by `exporters` exporters at once (one
/// thread each), each with `keys` keys changed per round, `rounds` rounds,
/// every round delivered by a flush.
fn delivery(url: &str, exporters: usize, keys: usize, rounds: usize, config: &ExportConfig) -> f64 {
    let total = std::thread::scope(|s| {
        let handles: Vec<_> = (0..exporters)
            .map(|e| {
                s.spawn(move || {
                    let src = Arc::new(Keys {
                        names: (0..keys).map(|i| format!("k{e}_{i}")).collect(),
                        values: (0..keys).map(|_| AtomicU64::new(0)).collect(),
                    });
                    let sink = RedisSink::new(url, "b:").unwrap();
                    let exporter = Exporter::with_config(
                        sink,
                        ExportConfig {
                            interval: Duration::from_secs(3600),
                            ..config.clone()
                        },
                    );
                    exporter.register_source(Arc::clone(&src));
                    let mut spent = Duration::ZERO;
                    for _ in 0..rounds {
                        src.values
                            .iter()
                            .for_each(|v| _ = v.fetch_add(1, Ordering::Relaxed));
                        let t = Instant::now();
                        exporter
                            .flush(Instant::now() + Duration::from_secs(60))
                            .unwrap();
                        spent += t.elapsed();
                    }
                    spent
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    });
    (exporters * keys * rounds) as f64 / total.as_secs_f64()
}

/// Nanoseconds per add over 1,000 RoughCounters, with or without an
/// exporter (every `interval`) shipping them to Redis.
fn add_cost(url: &str, with_exporter: Option<Duration>, adds: u64) -> f64 {
    // Leaked, to register them as `&'static` while the adds still index
    // one contiguous array (no `Arc` to follow).
    let counters: &'static [RoughCounter] =
        Vec::leak((0..1000).map(|_| RoughCounter::new()).collect());
    let exporter = with_exporter.map(|interval| {
        let e = Exporter::with_config(
            RedisSink::new(url, "a:").unwrap(),
            ExportConfig {
                interval,
                ..ExportConfig::default()
            },
        );
        for (i, c) in counters.iter().enumerate() {
            e.register(&format!("k{i}"), c);
        }
        e
    });
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let t = Instant::now();
    for _ in 0..adds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        counters[(x % 1000) as usize].inc();
    }
    let ns = t.elapsed().as_nanos() as f64 / adds as f64;
    if let Some(e) = exporter {
        e.flush(Instant::now() + Duration::from_secs(30)).unwrap();
        assert_eq!(e.delivered(), adds);
    }
    ns
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // nothing for `cargo bench -- --list` to see
    }
    let (_server, url) = start_server("bench");
    let reps = reps();
    println!("redis export bench (loopback, AOF everysec); median of {reps}");
    let config = ExportConfig::default();
    for (exporters, keys) in [(1, 20_000), (2, 20_000)] {
        let cpu = server_cpu(&url);
        let rates: Vec<f64> = (0..reps)
            .map(|_| delivery(&url, exporters, keys, 5, &config))
            .collect();
        let server_us = (server_cpu(&url) - cpu) * 1e6 / (reps * exporters * keys * 5) as f64;
        let (lo, hi) = rates
            .iter()
            .fold((f64::MAX, 0f64), |(a, b), &r| (a.min(r), b.max(r)));
        println!(
            "delivery, {exporters} exporter(s) x {keys} keys, batch {} keys x pipeline {}: \
             {:.0}k key-deltas/s in all ({:.0}k..{:.0}k); server CPU {:.2} us per key-delta",
            config.batch_keys,
            config.pipeline,
            median(rates) / 1e3,
            lo / 1e3,
            hi / 1e3,
            server_us
        );
    }
    let adds = 20_000_000;
    for interval in [Duration::from_millis(10), Duration::from_millis(100)] {
        let (mut with, mut without, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let a = add_cost(&url, None, adds);
            let b = add_cost(&url, Some(interval), adds);
            without.push(a);
            with.push(b);
            ratio.push(b / a);
        }
        println!(
            "RoughCounter::inc over 1000 counters, 1 thread: {:.2} ns without an exporter, \
             {:.2} ns with one ({interval:?} interval); ratio {:.2}x",
            median(without),
            median(with),
            median(ratio)
        );
    }
}
