//! The `prometheus-client` integration: shared counters registered in a
//! real `Registry`, incremented from several threads, encoded to text and
//! parsed back.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use shardcount::integrations::prometheus_client::Shared;
use shardcount::{Counter, RoughCounter};
use std::collections::HashMap;

/// `series -> value` from OpenMetrics text.
fn samples(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            (series.to_string(), value.parse().expect("an integer count"))
        })
        .collect()
}

fn encoded(registry: &Registry) -> String {
    let mut text = String::new();
    encode(&mut text, registry).expect("encodes");
    text
}

const THREADS: u64 = 4;
const PER_THREAD: u64 = 25_000;

#[test]
fn registered_counters_encode_exact_totals() {
    let exact: Shared<Counter> = Shared::default();
    let rough: Shared<RoughCounter> = Shared::default();
    let mut registry = Registry::default();
    registry.register("requests", "Requests served", exact.clone());
    registry.register("hits", "Cache hits", rough.clone());
    // Next to the crate's own counter, for the expected shape.
    let theirs: prometheus_client::metrics::counter::Counter = Default::default();
    registry.register("reference", "prometheus-client's counter", theirs.clone());

    let before = samples(&encoded(&registry));
    assert_eq!(before["requests_total"], 0);
    assert_eq!(before["hits_total"], 0);

    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (exact, rough, theirs) = (exact.clone(), rough.clone(), theirs.clone());
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    exact.inc();
                    rough.add(2);
                    theirs.inc();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let text = encoded(&registry);
    let s = samples(&text);
    assert_eq!(s["requests_total"], THREADS * PER_THREAD, "{text}");
    assert_eq!(s["hits_total"], 2 * THREADS * PER_THREAD, "{text}");
    assert_eq!(s["reference_total"], THREADS * PER_THREAD, "{text}");
    // Typed as counters, like prometheus-client's own.
    assert!(text.contains("# TYPE requests counter\n"), "{text}");
    assert!(text.contains("# TYPE hits counter\n"), "{text}");
    assert!(text.contains("# TYPE reference counter\n"), "{text}");
}

/// Encoding while threads count: each encoded value lies between what was
/// counted before the encode started and what was counted when it ended,
/// and never goes down.
#[test]
fn encoding_during_counting_is_monotonic() {
    let c: Shared<Counter> = Shared::default();
    let mut registry = Registry::default();
    registry.register("live", "counted while encoding", c.clone());
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (c, tx) = (c.clone(), tx.clone());
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    c.inc();
                }
                drop(tx); // the last one disconnects the channel
            })
        })
        .collect();
    drop(tx);
    let mut last = 0;
    while rx.try_recv() != Err(std::sync::mpsc::TryRecvError::Disconnected) {
        let v = samples(&encoded(&registry))["live_total"];
        assert!(v >= last, "went down: {last} -> {v}");
        assert!(v <= 2 * PER_THREAD);
        last = v;
    }
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(samples(&encoded(&registry))["live_total"], 2 * PER_THREAD);
}

/// A shared counter inside a labelled family works too (a `Family` builds
/// its members with `Default`).
#[test]
fn in_a_family() {
    let family: Family<Vec<(String, String)>, Shared<Counter>> = Family::default();
    let mut registry = Registry::default();
    registry.register("by_path", "requests by path", family.clone());
    for path in ["/a", "/b"] {
        for _ in 0..3 {
            family
                .get_or_create(&vec![("path".to_string(), path.to_string())])
                .inc();
        }
    }
    let s = samples(&encoded(&registry));
    assert_eq!(s["by_path_total{path=\"/a\"}"], 3);
    assert_eq!(s["by_path_total{path=\"/b\"}"], 3);
}
