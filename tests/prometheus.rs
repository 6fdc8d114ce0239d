//! The tikv `prometheus` integration: every counter type and family
//! registered as a `Collected` in a real `Registry`, added to from several
//! threads, and the `TextEncoder` output checked line for line.

use prometheus::core::Collector;
use prometheus::{Opts, Registry, TextEncoder};
use shardcount::integrations::prometheus::Collected;
use shardcount::{Counter, CounterMap, CounterSet, MaxCounter, MinCounter, RoughCounter, Stock};
use std::sync::Arc;

const THREADS: u64 = 4;
const PER_THREAD: u64 = 10_000;

shardcount::local_counter!(static SENT);

/// The message of `prometheus`'s `Error::Msg`, which descriptor checks
/// return.
fn msg(err: prometheus::Error) -> String {
    match err {
        prometheus::Error::Msg(m) => m,
        other => panic!("not a Msg: {other:?}"),
    }
}

fn text(registry: &Registry) -> String {
    TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encodes")
}

/// Runs `f(t, i)` for `i` in `0..PER_THREAD` on each of `THREADS` threads.
fn on_threads(f: impl Fn(u64, u64) + Sync) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let f = &f;
            s.spawn(move || (0..PER_THREAD).for_each(|i| f(t, i)));
        }
    });
}

#[test]
fn every_type_after_concurrent_adds() {
    let exact = Arc::new(Counter::new());
    let rough = Arc::new(RoughCounter::new());
    let peak = Arc::new(MaxCounter::new());
    let fastest = Arc::new(MinCounter::new());
    let tickets = Arc::new(Stock::new(100_000));
    // The map's label named for what its keys are (the default is `key`).
    let routes = Arc::new(CounterMap::<String>::new().with_label_name("route"));
    let shards = Arc::new(CounterSet::new(3));
    let registry = Registry::new();
    let reg = |c: Box<dyn Collector>| registry.register(c).expect("registers");
    reg(Box::new(
        Collected::new("requests_total", "Requests served", exact.clone()).unwrap(),
    ));
    reg(Box::new(
        Collected::new("hits_total", "Cache hits", rough.clone()).unwrap(),
    ));
    reg(Box::new(
        Collected::new("sent_total", "Messages sent", &SENT).unwrap(),
    ));
    reg(Box::new(
        Collected::new("queue_peak", "Deepest queue", peak.clone()).unwrap(),
    ));
    reg(Box::new(
        Collected::new("fastest_us", "Fastest reply", fastest.clone()).unwrap(),
    ));
    reg(Box::new(
        Collected::new("tickets", "Tickets left", tickets.clone()).unwrap(),
    ));
    reg(Box::new(
        Collected::new("routes_total", "Requests by route", routes.clone()).unwrap(),
    ));
    reg(Box::new(
        Collected::new("shard_total", "Work by shard", shards.clone()).unwrap(),
    ));

    // Added to the families before, so their (empty) samples show: none.
    let before = text(&registry);
    assert!(before.contains("requests_total 0\n"), "{before}");
    assert!(!before.contains("routes_total{"), "{before}");

    on_threads(|t, i| {
        exact.inc();
        rough.add(2);
        SENT.add(3);
        peak.record(t * PER_THREAD + i);
        fastest.record(1 + t * PER_THREAD + i);
        tickets.try_sub(1).unwrap();
        routes.add(&format!("/{}", i % 2), 1);
        shards.add((t % 3) as usize, 1);
    });
    let n = THREADS * PER_THREAD;
    // The registry sorts families by name and samples by label value.
    let expected = format!(
        "# HELP fastest_us Fastest reply\n\
         # TYPE fastest_us gauge\n\
         fastest_us 1\n\
         # HELP hits_total Cache hits\n\
         # TYPE hits_total counter\n\
         hits_total {}\n\
         # HELP queue_peak Deepest queue\n\
         # TYPE queue_peak gauge\n\
         queue_peak {}\n\
         # HELP requests_total Requests served\n\
         # TYPE requests_total counter\n\
         requests_total {n}\n\
         # HELP routes_total Requests by route\n\
         # TYPE routes_total counter\n\
         routes_total{{route=\"/0\"}} {}\n\
         routes_total{{route=\"/1\"}} {}\n\
         # HELP sent_total Messages sent\n\
         # TYPE sent_total counter\n\
         sent_total {}\n\
         # HELP shard_total Work by shard\n\
         # TYPE shard_total counter\n\
         shard_total{{index=\"0\"}} {}\n\
         shard_total{{index=\"1\"}} {PER_THREAD}\n\
         shard_total{{index=\"2\"}} {PER_THREAD}\n\
         # HELP tickets Tickets left\n\
         # TYPE tickets gauge\n\
         tickets {}\n",
        2 * n,
        n - 1,
        n / 2,
        n / 2,
        3 * n,
        2 * PER_THREAD,
        100_000 - n,
    );
    assert_eq!(text(&registry), expected);
}

/// Each scrape reads anew: a later add shows in the next scrape.
#[test]
fn each_scrape_reads_the_counter() {
    let c = Arc::new(Counter::new());
    let registry = Registry::new();
    let collected = Collected::new("live_total", "live", c.clone()).unwrap();
    registry.register(Box::new(collected)).unwrap();
    for k in 1..=3 {
        c.inc();
        assert!(text(&registry).ends_with(&format!("live_total {k}\n")));
    }
}

#[test]
fn invalid_names_are_prometheus_errors() {
    let c = Arc::new(Counter::new());
    for bad in ["", "9lives", "with-dash", "has space"] {
        let err = Collected::new(bad, "help", c.clone()).unwrap_err();
        assert_eq!(
            msg(err),
            format!("'{bad}' is not a valid metric name"),
            "{bad:?}"
        );
    }
    let err = Collected::new("ok_total", "", c.clone()).unwrap_err();
    assert_eq!(msg(err), "empty help string");

    let map: Arc<CounterMap<u32>> = Arc::default();
    let bad_label = Opts::new("by_total", "help").variable_label("9x");
    let err = Collected::with_opts(bad_label, map.clone()).unwrap_err();
    assert_eq!(msg(err), "'9x' is not a valid label name");

    // A variable label for a single count, or two for a family.
    let err = Collected::with_opts(Opts::new("one_total", "h").variable_label("a"), c).unwrap_err();
    assert_eq!(msg(err), "one_total takes no variable label, not [\"a\"]");
    let two = Opts::new("two_total", "h").variable_labels(vec!["a".into(), "b".into()]);
    let err = Collected::with_opts(two, map).unwrap_err();
    assert_eq!(
        msg(err),
        "two_total takes at most one variable label, not [\"a\", \"b\"]"
    );
}

/// A second collector with the same name is refused by the registry, as
/// for its own metrics.
#[test]
fn duplicate_names_are_refused() {
    let registry = Registry::new();
    let a = Collected::new("dup_total", "a", Arc::new(Counter::new())).unwrap();
    let b = Collected::new("dup_total", "a", Arc::new(Counter::new())).unwrap();
    registry.register(Box::new(a)).unwrap();
    assert!(matches!(
        registry.register(Box::new(b)),
        Err(prometheus::Error::AlreadyReg)
    ));
}

/// Namespace, constant labels and an own label name, next to
/// `IntCounterVec` with the same options: the same lines.
#[test]
fn opts_match_int_counter_vec() {
    let opts = |name: &str| {
        Opts::new(name, "Requests by path")
            .namespace("web")
            .const_label("zone", "a")
            .const_label("app", "x")
            .variable_label("path")
    };
    let ours: Arc<CounterMap<&'static str>> = Arc::default();
    let theirs = prometheus::IntCounterVec::new(opts("theirs_total"), &["path"]).unwrap();
    let registry = Registry::new();
    registry
        .register(Box::new(
            Collected::with_opts(opts("ours_total"), ours.clone()).unwrap(),
        ))
        .unwrap();
    registry.register(Box::new(theirs.clone())).unwrap();
    on_threads(|_, i| {
        let path = if i % 4 == 0 { "/a" } else { "/b" };
        ours.add(&path, 1);
        theirs.with_label_values(&[path]).inc();
    });
    let got = text(&registry);
    let ours_lines: Vec<_> = got.lines().filter(|l| l.contains("ours")).collect();
    let theirs_lines: Vec<_> = got
        .lines()
        .filter(|l| l.contains("theirs"))
        .map(|l| l.replace("theirs", "ours"))
        .collect();
    assert_eq!(ours_lines, theirs_lines);
    assert!(got.contains(&format!(
        "web_ours_total{{app=\"x\",path=\"/a\",zone=\"a\"}} {}\n",
        THREADS * PER_THREAD / 4
    )));
}

/// Label values are escaped by the encoder, as for `IntCounterVec`.
#[test]
fn label_values_are_escaped() {
    let m: Arc<CounterMap<String>> = Arc::default();
    let registry = Registry::new();
    registry
        .register(Box::new(
            Collected::new("odd_total", "odd keys", m.clone()).unwrap(),
        ))
        .unwrap();
    m.add(&"a\"b\\c\nd".to_string(), 1);
    assert!(text(&registry).ends_with("odd_total{key=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

#[path = "common/awkward.rs"]
mod awkward;
use awkward::awkward;

/// A member whose label's `Display` fails is left out (`to_string` used
/// to panic in the scrape); members whose labels print alike are one
/// sample, their sum (two samples with one label set are invalid).
#[test]
fn members_whose_labels_fail_or_print_alike() {
    let m = awkward();
    let registry = Registry::new();
    registry
        .register(Box::new(Collected::new("k_total", "K", m.clone()).unwrap()))
        .unwrap();
    let want = "# HELP k_total K\n# TYPE k_total counter\n\
                k_total{key=\"a\"} 2\nk_total{key=\"alias\"} 7\n";
    assert_eq!(text(&registry), want);
}

/// An unset gauge is exported as its read: a `MaxCounter`'s 0, a
/// `MinCounter`'s `u64::MAX` (as the nearest `f64`).
#[test]
fn unset_gauges_export_their_read() {
    let value = |c: &dyn Collector| c.collect()[0].get_metric()[0].get_gauge().get_value();
    let peak = Collected::new("peak", "p", Arc::new(MaxCounter::new())).unwrap();
    let fastest = Collected::new("fastest", "f", Arc::new(MinCounter::new())).unwrap();
    assert_eq!(value(&peak), 0.0);
    assert_eq!(value(&fastest), u64::MAX as f64);
}

/// A two-label family is one metric family with both label pairs on each
/// sample (after the constant ones, sorted by name), under default or
/// given names; a wrong number of variable labels is refused.
#[test]
fn labelled_counter_collects_both_label_pairs() {
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
    let family = Arc::new(shardcount::LabelledCounter::<(Method, Status)>::new());
    let registry = Registry::new();
    registry
        .register(Box::new(
            Collected::new("requests_total", "Requests", family.clone()).unwrap(),
        ))
        .unwrap();
    let renamed = Opts::new("renamed_total", "Requests")
        .const_label("zone", "a")
        .variable_labels(vec!["verb".into(), "outcome".into()]);
    registry
        .register(Box::new(
            Collected::with_opts(renamed, family.clone()).unwrap(),
        ))
        .unwrap();
    on_threads(|t, _| {
        family.inc((
            Method::Post,
            if t % 2 == 0 {
                Status::Ok
            } else {
                Status::Failed
            },
        ))
    });
    let text = text(&registry);
    let half = THREADS / 2 * PER_THREAD;
    assert!(
        text.contains(&format!(
            "requests_total{{method=\"post\",status=\"ok\"}} {half}\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "requests_total{{method=\"post\",status=\"failed\"}} {half}\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("requests_total{method=\"get\",status=\"ok\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "renamed_total{{outcome=\"ok\",verb=\"post\",zone=\"a\"}} {half}\n"
        )),
        "{text}"
    );
    let one = Opts::new("x_total", "x").variable_label("verb");
    let err = msg(Collected::with_opts(one, family).unwrap_err());
    assert!(err.contains("[\"method\", \"status\"]"), "{err}");
}
