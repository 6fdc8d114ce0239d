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

/// `MaxCounter`, `MinCounter` and `Stock` are typed and encoded as gauges
/// (a counter would read `_total` and `# TYPE .. counter`).
#[test]
fn max_min_and_stock_encode_as_gauges() {
    use shardcount::{MaxCounter, MinCounter, Stock};
    let peak: Shared<MaxCounter> = Shared::default();
    let fastest: Shared<MinCounter> = Shared::default();
    let tickets = Shared::new(Stock::new(10));
    let mut registry = Registry::default();
    registry.register("queue_peak", "deepest queue", peak.clone());
    registry.register("fastest_us", "fastest reply", fastest.clone());
    registry.register("tickets", "tickets left", tickets.clone());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (peak, fastest) = (&peak, &fastest);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    peak.record(t * PER_THREAD + i);
                    fastest.record(1 + t * PER_THREAD + i);
                }
            });
        }
    });
    tickets.try_sub(3).unwrap();
    let text = encoded(&registry);
    for name in ["queue_peak", "fastest_us", "tickets"] {
        assert!(text.contains(&format!("# TYPE {name} gauge\n")), "{text}");
    }
    assert!(!text.contains("_total"), "{text}");
    let s = samples(&text);
    assert_eq!(s["queue_peak"], THREADS * PER_THREAD - 1);
    assert_eq!(s["fastest_us"], 1);
    assert_eq!(s["tickets"], 7);
}

/// A `CounterSet` and a `CounterMap` are one metric each, one labelled
/// sample per member, exact after concurrent adds; a family of gauges is
/// a gauge family.
#[test]
fn set_and_map_encode_one_sample_per_member() {
    use shardcount::{CounterMap, CounterSet, MaxCounter};
    let set = Shared::new(CounterSet::new(3));
    // Its label named for what the keys are (the default is `key`).
    let map = Shared::new(CounterMap::<String>::new().with_label_name("path"));
    let peaks: Family<Vec<(String, String)>, Shared<MaxCounter>> = Family::default();
    let mut registry = Registry::default();
    registry.register("status", "by status", set.clone());
    registry.register("route", "by route", map.clone());
    registry.register("peak", "peak by queue", peaks.clone());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for i in 0..PER_THREAD {
                    set.add((i % 3) as usize, 1);
                    // A quote and a backslash: escaped in the label value.
                    map.add(&["/a", "/b\"q\\"][(i % 2) as usize].to_string(), 2);
                }
            });
        }
    });
    peaks
        .get_or_create(&vec![("queue".into(), "in".into())])
        .record(5);
    let text = encoded(&registry);
    let s = samples(&text);
    let thirds = |r| THREADS * (0..PER_THREAD).filter(|i| i % 3 == r).count() as u64;
    for r in 0..3 {
        assert_eq!(
            s[&format!("status_total{{index=\"{r}\"}}")],
            thirds(r),
            "{text}"
        );
    }
    assert_eq!(
        s["route_total{path=\"/a\"}"],
        THREADS * PER_THREAD,
        "{text}"
    );
    assert_eq!(
        s["route_total{path=\"/b\\\"q\\\\\"}"],
        THREADS * PER_THREAD,
        "{text}"
    );
    assert!(text.contains("# TYPE status counter\n"), "{text}");
    assert!(text.contains("# TYPE peak gauge\n"), "{text}");
    assert_eq!(s["peak{queue=\"in\"}"], 5, "{text}");
    assert_eq!(text.matches("# TYPE").count(), 3, "one metric each: {text}");
}

/// An unset gauge is encoded as its read: a `MaxCounter`'s 0, a
/// `MinCounter`'s `u64::MAX`.
#[test]
fn unset_gauges_encode_their_read() {
    use shardcount::{MaxCounter, MinCounter};
    let mut registry = Registry::default();
    registry.register("peak", "p", Shared::<MaxCounter>::default());
    registry.register("fastest", "f", Shared::<MinCounter>::default());
    let s = samples(&encoded(&registry));
    assert_eq!((s["peak"], s["fastest"]), (0, u64::MAX));
}

#[path = "common/awkward.rs"]
mod awkward;
use awkward::Awkward;

/// A member whose label's `Display` fails is left out (the whole encoding
/// used to fail); members whose labels print alike are one sample, their
/// sum (two samples with one label set are invalid).
#[test]
fn members_whose_labels_fail_or_print_alike() {
    let m: Shared<shardcount::CounterMap<Awkward>> = Shared::default();
    m.add(&Awkward::Plain("a"), 2);
    m.add(&Awkward::Broken, 5);
    m.add(&Awkward::Alias(1), 3);
    m.add(&Awkward::Alias(2), 4);
    let mut registry = Registry::default();
    registry.register("k", "K", m.clone());
    let text = encoded(&registry);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("k_total")).collect();
    assert_eq!(
        lines,
        ["k_total{key=\"a\"} 2", "k_total{key=\"alias\"} 7"],
        "{text}"
    );
}

/// A two-label family encodes one sample per member with both label
/// pairs, counting every add made from several threads.
#[test]
fn labelled_counter_encodes_both_label_pairs() {
    #[derive(Clone, Copy, shardcount::Label)]
    enum Method {
        Get,
        Post,
    }
    #[derive(Clone, Copy, shardcount::Label)]
    enum Status {
        Ok,
        #[label(rename = "5xx")]
        ServerError,
    }
    let requests = Shared::new(shardcount::LabelledCounter::<(Method, Status)>::new());
    let mut registry = Registry::default();
    registry.register("requests", "Requests", requests.clone());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..PER_THREAD {
                    requests.inc((Method::Post, Status::ServerError));
                }
                requests.add((Method::Get, Status::Ok), 2);
            });
        }
    });
    let got = samples(&encoded(&registry));
    assert_eq!(
        got[r#"requests_total{method="post",status="5xx"}"#],
        THREADS * PER_THREAD
    );
    assert_eq!(
        got[r#"requests_total{method="get",status="ok"}"#],
        THREADS * 2
    );
    assert_eq!(got[r#"requests_total{method="get",status="5xx"}"#], 0);
    assert_eq!(got.len(), 4, "{got:?}");
}

/// Statics of every counter type and family register through
/// `Shared::from_static` (or `From<&'static _>`) and encode exactly what was
/// counted through the statics themselves, after registration.
#[test]
fn statics_of_every_type_register_and_encode() {
    use shardcount::{
        CounterMap, CounterSet, Histogram, LabelledCounter, MaxCounter, MinCounter, Stock,
    };
    use std::sync::LazyLock;

    #[derive(Clone, Copy, shardcount::Label)]
    enum Method {
        Get,
        Post,
    }
    static EXACT: Counter = Counter::new();
    static ROUGH: RoughCounter = RoughCounter::new();
    shardcount::local_counter!(static LOCAL);
    static BY_METHOD: LabelledCounter<Method> = LabelledCounter::new();
    static PEAK: MaxCounter = MaxCounter::new();
    static LOW: MinCounter = MinCounter::new();
    static SET: LazyLock<CounterSet> = LazyLock::new(|| CounterSet::new(2));
    static ROUTES: LazyLock<CounterMap<&'static str>> = LazyLock::new(CounterMap::new);
    static TICKETS: LazyLock<Stock> = LazyLock::new(|| Stock::new(10));
    static LATENCY: LazyLock<Histogram> = LazyLock::new(|| Histogram::with_bounds(&[10]));

    let mut registry = Registry::default();
    registry.register("exact", "e", Shared::from_static(&EXACT));
    registry.register("rough", "r", Shared::from(&ROUGH));
    registry.register("local", "l", Shared::from_static(&LOCAL));
    registry.register("by_method", "m", Shared::from_static(&BY_METHOD));
    registry.register("peak", "p", Shared::from_static(&PEAK));
    registry.register("low", "w", Shared::from_static(&LOW));
    registry.register("set", "s", Shared::from_static(&*SET));
    registry.register("routes", "r", Shared::from_static(&*ROUTES));
    registry.register("tickets", "t", Shared::from_static(&*TICKETS));
    registry.register("latency", "h", Shared::from_static(&*LATENCY));

    std::thread::scope(|s| {
        s.spawn(|| {
            EXACT.add(3);
            ROUGH.add(4);
            LOCAL.add(5);
            BY_METHOD.add(Method::Post, 6);
            PEAK.record(7);
            LOW.record(8);
            SET.add(1, 9);
            ROUTES.add("/", 10);
            TICKETS.try_sub(1).unwrap();
            LATENCY.record(5);
            LATENCY.record(50);
        });
    });

    let text = encoded(&registry);
    let expected = "\
# HELP exact e.
# TYPE exact counter
exact_total 3
# HELP rough r.
# TYPE rough counter
rough_total 4
# HELP local l.
# TYPE local counter
local_total 5
# HELP by_method m.
# TYPE by_method counter
by_method_total{method=\"get\"} 0
by_method_total{method=\"post\"} 6
# HELP peak p.
# TYPE peak gauge
peak 7
# HELP low w.
# TYPE low gauge
low 8
# HELP set s.
# TYPE set counter
set_total{index=\"0\"} 0
set_total{index=\"1\"} 9
# HELP routes r.
# TYPE routes counter
routes_total{key=\"/\"} 10
# HELP tickets t.
# TYPE tickets gauge
tickets 9
# HELP latency h.
# TYPE latency histogram
latency_sum 55.0
latency_count 2
latency_bucket{le=\"10.0\"} 1
latency_bucket{le=\"+Inf\"} 2
# EOF
";
    assert_eq!(text, expected);
}

/// A key evicted between two scrapes: the second scrape reports it at its
/// final total (what it gained since the first included), and a third,
/// after the next eviction pass, no longer lists it.
#[test]
fn an_evicted_key_reaches_the_next_scrape_at_its_final_total() {
    use shardcount::CounterMap;
    use std::time::Duration;
    let users = Shared::new(CounterMap::<u64>::new().with_label_name("user_id"));
    let mut registry = Registry::default();
    registry.register("visits", "Visits by user", users.clone());
    users.add(&7, 1);
    assert_eq!(
        samples(&encoded(&registry))["visits_total{user_id=\"7\"}"],
        1
    );
    users.add(&7, 2); // after the first scrape
    assert!(users.evict_idle(Duration::ZERO).is_empty()); // notes it
    assert_eq!(users.evict_idle(Duration::ZERO), [(7, 3)]); // evicts it
    let text = encoded(&registry);
    assert_eq!(samples(&text)["visits_total{user_id=\"7\"}"], 3, "{text}");
    let _ = users.evict_idle(Duration::ZERO);
    let text = encoded(&registry);
    assert!(!text.contains("user_id=\"7\""), "{text}");
}
