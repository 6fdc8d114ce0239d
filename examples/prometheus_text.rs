//! Counts from 2 threads into shardcount counters registered in a tikv
//! `prometheus` registry, next to its own `IntCounter`, and prints what its
//! `TextEncoder` produces.
//!
//! ```text
//! cargo run --example prometheus_text --features prometheus
//! ```
//!
//! `scripts/test-all` runs it and checks the exact sample lines.

use prometheus::{IntCounter, Registry, TextEncoder};
use shardcount::integrations::prometheus::Collected;
use shardcount::{Counter, CounterMap, MaxCounter};
use std::sync::Arc;

const PER_THREAD: u64 = 100_000;

fn main() -> Result<(), prometheus::Error> {
    let requests = Arc::new(Counter::new());
    let routes: Arc<CounterMap<&'static str>> = Arc::default();
    let peak = Arc::new(MaxCounter::new());
    let theirs = IntCounter::new("theirs_requests_total", "prometheus's own IntCounter")?;

    let registry = Registry::new();
    registry.register(Box::new(Collected::new(
        "requests_total",
        "Requests served",
        requests.clone(),
    )?))?;
    registry.register(Box::new(Collected::new(
        "route_requests_total",
        "Requests by route",
        routes.clone(),
    )?))?;
    registry.register(Box::new(Collected::new(
        "batch_peak",
        "Largest batch",
        peak.clone(),
    )?))?;
    registry.register(Box::new(theirs.clone()))?;

    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (requests, routes, peak, theirs) = (&requests, &routes, &peak, &theirs);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    requests.inc();
                    routes.add(if i % 4 == 0 { &"/login" } else { &"/" }, 1);
                    peak.record(t * 10 + i % 10);
                    theirs.inc();
                }
            });
        }
    });

    print!(
        "{}",
        TextEncoder::new().encode_to_string(&registry.gather())?
    );
    Ok(())
}
