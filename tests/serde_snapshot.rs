//! `Snapshot` (feature `serde`): the exact JSON of every counter type and
//! family, after adds from several threads.

use shardcount::integrations::serde::Snapshot;
use shardcount::{Counter, CounterMap, CounterSet, MaxCounter, MinCounter, RoughCounter, Stock};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 10_000;

shardcount::local_counter!(static SENT);

fn json<F: shardcount::contract::CountFamily>(counter: &F) -> String {
    serde_json::to_string(&Snapshot::of(counter)).expect("serializes")
}

#[test]
fn every_type_after_concurrent_adds() {
    let exact = Counter::new();
    let rough = RoughCounter::new();
    let (peak, fastest) = (MaxCounter::new(), MinCounter::new());
    let tickets = Stock::new(100_000);
    // Its label named for what the keys are (the default is `key`).
    let routes: CounterMap<String> = CounterMap::new().with_label_name("path");
    let shards = CounterSet::new(12);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (exact, rough, peak, fastest, tickets, routes, shards) =
                (&exact, &rough, &peak, &fastest, &tickets, &routes, &shards);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    exact.inc();
                    rough.add(2);
                    SENT.add(3);
                    peak.record(t * PER_THREAD + i);
                    fastest.record(1 + t * PER_THREAD + i);
                    tickets.try_sub(1).unwrap();
                    routes.add(&["/b", "/a", "/c/d"][(i % 3) as usize].to_string(), 1);
                    shards.add(if t == 0 { 10 } else { 2 }, 1);
                }
            });
        }
    });
    let n = THREADS * PER_THREAD;
    assert_eq!(json(&exact), format!(r#"{{"kind":"counter","value":{n}}}"#));
    assert_eq!(
        json(&rough),
        format!(r#"{{"kind":"counter","value":{}}}"#, 2 * n)
    );
    assert_eq!(
        json(&SENT),
        format!(r#"{{"kind":"counter","value":{}}}"#, 3 * n)
    );
    assert_eq!(
        json(&peak),
        format!(r#"{{"kind":"gauge","value":{}}}"#, n - 1)
    );
    assert_eq!(json(&fastest), r#"{"kind":"gauge","value":1}"#);
    assert_eq!(
        json(&tickets),
        format!(r#"{{"kind":"gauge","value":{}}}"#, 100_000 - n)
    );
    // 10_000 = 3 * 3333 + 1: "/b" (i % 3 == 0) has one more per thread.
    assert_eq!(
        json(&routes),
        format!(
            r#"{{"kind":"counter","label":"path","values":{{"/a":{},"/b":{},"/c/d":{}}}}}"#,
            THREADS * 3333,
            THREADS * 3334,
            THREADS * 3333
        )
    );
    // Indices by value (10 after 9, not after 1).
    assert_eq!(
        json(&shards),
        format!(
            r#"{{"kind":"counter","label":"index","values":{{"0":0,"1":0,"2":{},"3":0,"4":0,"5":0,"6":0,"7":0,"8":0,"9":0,"10":{PER_THREAD},"11":0}}}}"#,
            3 * PER_THREAD
        )
    );
}

#[test]
fn empty_family_and_extremes() {
    let empty: CounterMap<u32> = CounterMap::new();
    assert_eq!(
        json(&empty),
        r#"{"kind":"counter","label":"key","values":{}}"#
    );
    assert_eq!(
        json(&CounterSet::new(0)),
        r#"{"kind":"counter","label":"index","values":{}}"#
    );
    // Every digit of a u64, no float.
    let big = MaxCounter::new();
    big.record(u64::MAX);
    assert_eq!(
        json(&big),
        r#"{"kind":"gauge","value":18446744073709551615}"#
    );
    // A fresh MinCounter reads u64::MAX (no record yet).
    assert_eq!(
        json(&MinCounter::new()),
        format!(r#"{{"kind":"gauge","value":{}}}"#, MinCounter::new().get())
    );
}

/// Keys are the `Display` text, escaped as JSON strings; numeric keys come
/// first by value, then the rest by text, whatever the insertion order.
#[test]
fn key_order_and_escaping() {
    let m: CounterMap<String> = CounterMap::new();
    for k in ["b", "10", "a\"q", "9", "", "02"] {
        m.add(&k.to_string(), 1);
    }
    assert_eq!(
        json(&m),
        r#"{"kind":"counter","label":"key","values":{"02":1,"9":1,"10":1,"":1,"a\"q":1,"b":1}}"#
    );
    // Same members, other insertion order: same text.
    let n: CounterMap<String> = CounterMap::new();
    for k in ["02", "", "9", "a\"q", "10", "b"] {
        n.add(&k.to_string(), 1);
    }
    assert_eq!(json(&n), json(&m));
    assert_eq!(Snapshot::of(&n), Snapshot::of(&m));
}

/// The snapshot is read once: later adds do not change it.
#[test]
fn a_snapshot_is_a_value() {
    let c = Counter::from(2);
    let snap = Snapshot::of(&c);
    c.add(5);
    assert_eq!(snap.value(), Some(2));
    assert_eq!(
        serde_json::to_string(&snap).unwrap(),
        r#"{"kind":"counter","value":2}"#
    );
    // Nested in a caller's own structure.
    let body = serde_json::json!({ "requests": snap, "now": Snapshot::of(&c) });
    assert_eq!(
        body.to_string(),
        r#"{"now":{"kind":"counter","value":7},"requests":{"kind":"counter","value":2}}"#
    );
}

#[path = "common/awkward.rs"]
mod awkward;
use awkward::awkward;

/// A member whose label's `Display` fails is left out (`to_string` used
/// to panic); members whose labels print alike are one entry, their sum
/// (a JSON reader keeps only one of two entries with one name).
#[test]
fn members_whose_labels_fail_or_print_alike() {
    let m = awkward();
    assert_eq!(
        json(&*m),
        r#"{"kind":"counter","label":"key","values":{"a":2,"alias":7}}"#
    );
}

/// A two-label family lists both label names and keys each member by its
/// two texts, with every add from several threads counted.
#[test]
fn labelled_counter_snapshot_has_both_labels() {
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
    let family = shardcount::LabelledCounter::<(Method, Status)>::new();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| (0..PER_THREAD).for_each(|_| family.inc((Method::Get, Status::Failed))));
        }
    });
    family.add((Method::Post, Status::Ok), 3);
    let n = THREADS * PER_THREAD;
    assert_eq!(
        json(&family),
        format!(
            r#"{{"kind":"counter","labels":["method","status"],"values":{{"get,failed":{n},"get,ok":0,"post,failed":0,"post,ok":3}}}}"#
        )
    );
    let snap = Snapshot::of(&family);
    assert_eq!(snap.label_names(), ["method", "status"]);
    // One label: the shape of any other family.
    #[derive(Clone, Copy, shardcount::Label)]
    enum Tier {
        Free,
    }
    let one = shardcount::LabelledCounter::<Tier>::new();
    one.inc(Tier::Free);
    assert_eq!(
        json(&one),
        r#"{"kind":"counter","label":"tier","values":{"free":1}}"#
    );
}
