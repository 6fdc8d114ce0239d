//! The OpenTelemetry integration through the real SDK: instruments
//! registered with `observe`, collected by a periodic reader (flushed by
//! hand) into the in-memory exporter, read back as data points.

use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider,
    Temporality,
};
use shardcount::integrations::opentelemetry::{observe, Observe};
use shardcount::{Counter, CounterMap, CounterSet, MaxCounter, MinCounter, RoughCounter, Stock};
use std::collections::BTreeMap;
use std::sync::Arc;

const THREADS: u64 = 4;
const ADDS: u64 = 10_000;

/// What one data point was: the instrument's type, and its value.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Point {
    /// A monotonic sum with the reader's temporality.
    Sum(u64, Temporality),
    Gauge(u64),
}

/// (instrument name, its attributes as `key=value`) → point.
type Points = BTreeMap<(String, Vec<String>), Point>;

fn provider(temporality: Temporality) -> (SdkMeterProvider, InMemoryMetricExporter) {
    let exporter = InMemoryMetricExporterBuilder::new()
        .with_temporality(temporality)
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    (provider, exporter)
}

/// Collects once and returns that collection's data points.
fn collect(provider: &SdkMeterProvider, exporter: &InMemoryMetricExporter) -> Points {
    exporter.reset();
    provider.force_flush().unwrap();
    let exported = exporter.get_finished_metrics().unwrap();
    assert_eq!(exported.len(), 1, "one flush, one export");
    let mut points = Points::new();
    for metric in exported[0].scope_metrics().flat_map(|s| s.metrics()) {
        let name = metric.name().to_string();
        let attributes = |a: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
            let mut a: Vec<String> = a.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
            a.sort();
            a
        };
        match metric.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                assert!(sum.is_monotonic(), "{name}");
                for p in sum.data_points() {
                    let key = (name.clone(), attributes(&mut p.attributes()));
                    let point = Point::Sum(p.value(), sum.temporality());
                    assert!(points.insert(key, point).is_none(), "{name}: duplicate");
                }
            }
            AggregatedMetrics::U64(MetricData::Gauge(gauge)) => {
                for p in gauge.data_points() {
                    let key = (name.clone(), attributes(&mut p.attributes()));
                    assert!(points.insert(key, Point::Gauge(p.value())).is_none());
                }
            }
            other => panic!("{name}: unexpected data {other:?}"),
        }
    }
    points
}

fn one(name: &str) -> (String, Vec<String>) {
    (name.to_string(), Vec::new())
}

fn labelled(name: &str, attribute: &str) -> (String, Vec<String>) {
    (name.to_string(), vec![attribute.to_string()])
}

static REQUESTS: Counter = Counter::new();
shardcount::local_counter!(static SENT);

/// Every contract type after concurrent adds: exact values, the right
/// instrument type, one data point per member with its attribute.
#[test]
fn exact_values_and_attributes_after_concurrent_adds() {
    let (provider, exporter) = provider(Temporality::Cumulative);
    let meter = provider.meter("test");
    let rough = Arc::new(RoughCounter::new());
    let peak = Arc::new(MaxCounter::new());
    let fastest = Arc::new(MinCounter::new());
    let stock = Arc::new(Stock::new(1_000_000));
    // The map's attribute named by the map (the default is `key`).
    let routes = Arc::new(CounterMap::<String>::new().with_label_name("route"));
    let workers = Arc::new(CounterSet::new(THREADS as usize));
    let _handles = [
        observe(&meter, "requests", &REQUESTS),
        observe(&meter, "rough", rough.clone()),
        observe(&meter, "sent", &SENT),
        observe(&meter, "peak", peak.clone()),
        observe(&meter, "fastest", fastest.clone()),
        observe(&meter, "stock", stock.clone()),
        observe(&meter, "routes", routes.clone()),
        Observe::new("workers", workers.clone())
            .with_label_name("worker")
            .register(&meter),
    ];

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (rough, peak, fastest, stock, routes, workers) =
                (&rough, &peak, &fastest, &stock, &routes, &workers);
            s.spawn(move || {
                let mine = format!("/t{t}");
                let shared = "/shared".to_string();
                let handle = routes.handle(&shared);
                for i in 0..ADDS {
                    REQUESTS.inc();
                    rough.add(2);
                    SENT.add(3);
                    peak.record(t * ADDS + i);
                    fastest.record(1 + t * ADDS + i);
                    stock.try_sub(1).unwrap();
                    routes.add(&mine, 1);
                    handle.inc();
                    workers.add(t as usize, t + 1);
                }
            });
        }
    });

    let n = THREADS * ADDS;
    let mut want = Points::new();
    let sum = |v| Point::Sum(v, Temporality::Cumulative);
    want.insert(one("requests"), sum(n));
    want.insert(one("rough"), sum(2 * n));
    want.insert(one("sent"), sum(3 * n));
    want.insert(one("peak"), Point::Gauge(n - 1));
    want.insert(one("fastest"), Point::Gauge(1));
    want.insert(one("stock"), Point::Gauge(1_000_000 - n));
    want.insert(labelled("routes", "route=/shared"), sum(n));
    for t in 0..THREADS {
        want.insert(labelled("routes", &format!("route=/t{t}")), sum(ADDS));
        want.insert(
            labelled("workers", &format!("worker={t}")),
            sum((t + 1) * ADDS),
        );
    }
    assert_eq!(collect(&provider, &exporter), want);
    // A second collection with no adds in between sees the same totals.
    assert_eq!(collect(&provider, &exporter), want);
}

/// Delta temporality: the SDK turns the cumulative observations into
/// per-interval deltas, exact for each interval, per key too, and zero
/// for an interval with no adds.
#[test]
fn delta_temporality_over_several_collections() {
    let (provider, exporter) = provider(Temporality::Delta);
    let meter = provider.meter("test");
    let hits = Arc::new(Counter::new());
    let rough = Arc::new(RoughCounter::new());
    let routes: Arc<CounterMap<&'static str>> = Arc::default();
    let _handles = [
        observe(&meter, "hits", hits.clone()),
        observe(&meter, "rough", rough.clone()),
        observe(&meter, "routes", routes.clone()),
    ];
    let delta = |v| Point::Sum(v, Temporality::Delta);

    for round in 0..5u64 {
        // Round 2 adds nothing: each delta is 0.
        let per_thread = if round == 2 { 0 } else { 1000 * (round + 1) };
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (hits, rough, routes) = (&hits, &rough, &routes);
                s.spawn(move || {
                    for _ in 0..per_thread {
                        hits.inc();
                        rough.inc();
                        routes.add(&"/a", 1);
                        if t == 0 {
                            routes.add(&"/b", 2);
                        }
                    }
                });
            }
        });
        let got = collect(&provider, &exporter);
        let n = THREADS * per_thread;
        let mut want = Points::new();
        want.insert(one("hits"), delta(n));
        want.insert(one("rough"), delta(n));
        want.insert(labelled("routes", "key=/a"), delta(n));
        want.insert(labelled("routes", "key=/b"), delta(2 * per_thread));
        assert_eq!(got, want, "round {round}");
    }
}

/// A map that gains keys between collections (which can reorder its
/// visit) still reports each key's own total under its own attribute.
#[test]
fn growing_map_keeps_each_key_its_value() {
    let (provider, exporter) = provider(Temporality::Cumulative);
    let meter = provider.meter("test");
    let map: Arc<CounterMap<u64>> = Arc::default();
    let _h = observe(&meter, "ids", map.clone());
    for round in 1..=6u64 {
        for k in 0..round * 40 {
            map.add(&k, k + 1);
        }
        let got = collect(&provider, &exporter);
        let want: Points = (0..round * 40)
            .map(|k| {
                // Key k was added to in each round since it appeared.
                let rounds_in = round - k / 40;
                let total = (k + 1) * rounds_in;
                (
                    labelled("ids", &format!("key={k}")),
                    Point::Sum(total, Temporality::Cumulative),
                )
            })
            .collect();
        assert_eq!(got, want, "round {round}");
    }
}

#[path = "common/awkward.rs"]
mod awkward;
use awkward::{awkward, Awkward};

/// A member whose label's `Display` fails is left out (it used to be
/// observed under the part written, `bro`); members whose labels print
/// alike are one data point, their sum (the SDK kept the last one).
#[test]
fn members_whose_labels_fail_or_print_alike() {
    let (provider, exporter) = provider(Temporality::Cumulative);
    let m = awkward();
    let _h = observe(&provider.meter("test"), "k", m.clone());
    for round in 0..2 {
        let mut want = Points::new();
        let sum = |v| Point::Sum(v, Temporality::Cumulative);
        want.insert(labelled("k", "key=a"), sum(2));
        want.insert(labelled("k", "key=alias"), sum(7 + round));
        assert_eq!(collect(&provider, &exporter), want, "round {round}");
        m.add(&Awkward::Alias(1), 1);
    }
}

/// An unset gauge is observed as its read: a `MaxCounter`'s 0, a
/// `MinCounter`'s `u64::MAX`.
#[test]
fn unset_gauges_observe_their_read() {
    let (provider, exporter) = provider(Temporality::Cumulative);
    let meter = provider.meter("test");
    let _h = [
        observe(&meter, "peak", Arc::new(MaxCounter::new())),
        observe(&meter, "fastest", Arc::new(MinCounter::new())),
    ];
    let mut want = Points::new();
    want.insert(one("peak"), Point::Gauge(0));
    want.insert(one("fastest"), Point::Gauge(u64::MAX));
    assert_eq!(collect(&provider, &exporter), want);
}

/// A counter taken between collections: the delta reader must not lose
/// what was added after the take, nor panic on the fall.
#[test]
#[ignore = "opentelemetry_sdk 0.33 subtracts the previous observation of an observable counter: \
            a take makes it overflow (a panic in its reader thread in debug builds); the module \
            docs say not to take an observed counter; a fix needs a restart the SDK can express"]
fn delta_temporality_with_a_take_between_collections() {
    let (provider, exporter) = provider(Temporality::Delta);
    let hits = Arc::new(Counter::new());
    let _h = observe(&provider.meter("test"), "hits", hits.clone());
    hits.add(10);
    assert_eq!(
        collect(&provider, &exporter)[&one("hits")],
        Point::Sum(10, Temporality::Delta)
    );
    assert_eq!(hits.take(), 10);
    hits.add(4);
    assert_eq!(
        collect(&provider, &exporter)[&one("hits")],
        Point::Sum(4, Temporality::Delta)
    );
}

/// A two-label family is one instrument whose data points each carry both
/// attributes, at every add from several threads, over two collections.
#[test]
fn labelled_counter_points_carry_both_attributes() {
    #[derive(Clone, Copy, shardcount::Label)]
    enum Method {
        Get,
        Post,
    }
    #[derive(Clone, Copy, shardcount::Label)]
    enum Status {
        Ok,
        Failed,
    }
    static FAMILY: shardcount::LabelledCounter<(Method, Status)> =
        shardcount::LabelledCounter::new();
    let (provider, exporter) = provider(Temporality::Cumulative);
    let _handle = observe(&provider.meter("test"), "calls", &FAMILY);
    let add = || {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    let status = if t % 2 == 0 {
                        Status::Ok
                    } else {
                        Status::Failed
                    };
                    (0..ADDS).for_each(|_| FAMILY.inc((Method::Post, status)));
                });
            }
        });
    };
    let key = |m: &str, s: &str| {
        (
            "calls".to_string(),
            vec![format!("method={m}"), format!("status={s}")],
        )
    };
    let half = THREADS / 2 * ADDS;
    for round in 1..=2 {
        add();
        let points = collect(&provider, &exporter);
        let sum = |v| Point::Sum(v, Temporality::Cumulative);
        assert_eq!(points[&key("post", "ok")], sum(round * half));
        assert_eq!(points[&key("post", "failed")], sum(round * half));
        assert_eq!(points[&key("get", "ok")], sum(0));
        assert_eq!(points.len(), 4, "{points:?}");
    }
}
