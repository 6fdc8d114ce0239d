//! Typed labels: derived and tuple labels round-trip, and labelled adds
//! from several threads match a sequential reference.

use shardcount::contract::CountFamily;
use shardcount::{Label, LabelledCounter};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Label)]
enum Method {
    Get,
    Post,
    Put,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Label)]
#[label(name = "code")]
enum Status {
    Ok,
    #[label(rename = "5xx")]
    ServerError,
    NotFound,
    TooManyRequests,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Label)]
struct Request {
    method: Method,
    #[label(name = "status")]
    code: Status,
}

/// Every index maps back to a value with that index, and texts follow the
/// fields' own, for derived structs and tuples alike.
#[test]
fn indices_round_trip_and_texts_follow_fields() {
    assert_eq!(Request::COUNT, 12);
    assert_eq!(Request::NAMES, ["method", "status"]);
    assert_eq!(<(Status, Method)>::NAMES, ["code", "method"]);
    assert_eq!(<(Method, Status, Method)>::COUNT, 36);
    for i in 0..Request::COUNT {
        let r = Request::from_index(i).unwrap();
        assert_eq!(r.index(), i);
        assert_eq!(Request::text(i, 0), Method::text(r.method.index(), 0));
        assert_eq!(Request::text(i, 1), Status::text(r.code.index(), 0));
        let t = <(Status, Method)>::from_index(i).unwrap();
        assert_eq!(t.index(), i);
        assert_eq!(<(Status, Method)>::text(i, 1), Method::text(t.1.index(), 0));
    }
    for i in 0..36 {
        let t = <(Method, Status, Method)>::from_index(i).unwrap();
        assert_eq!(t.index(), i);
        assert_eq!(
            <(Method, Status, Method)>::text(i, 1),
            Status::text(t.1.index(), 0)
        );
    }
    assert_eq!(Request::from_index(12), None);
    assert_eq!((Request::text(12, 0), Request::text(0, 2)), (None, None));
    let texts: Vec<_> = (0..4).map(|i| Status::text(i, 0).unwrap()).collect();
    assert_eq!(texts, ["ok", "5xx", "not_found", "too_many_requests"]);
}

/// A derived value prints its own exported text (renamed or snake case),
/// and a type's own `Display` still compiles beside the derive and wins
/// for `{}`.
#[test]
fn a_value_shows_its_exported_text() {
    assert_eq!(Status::ServerError.as_str(), "5xx");
    assert_eq!(Status::TooManyRequests.as_str(), "too_many_requests");
    let r = Request {
        method: Method::Put,
        code: Status::NotFound,
    };
    assert_eq!(
        (r.text_of(0), r.text_of(1), r.text_of(2)),
        (Some("put"), Some("not_found"), None)
    );

    #[derive(Clone, Copy, Label)]
    enum Tier {
        Free,
    }
    impl std::fmt::Display for Tier {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Free tier")
        }
    }
    assert_eq!(
        (Tier::Free.to_string(), Tier::Free.as_str()),
        ("Free tier".to_string(), "free")
    );
}

/// Four threads add pseudo-random labels and amounts; the family's totals
/// equal a sequential replay of the same streams, per label and in sum.
#[test]
fn threads_match_a_sequential_reference() {
    static FAMILY: LabelledCounter<Request> = LabelledCounter::new();
    const THREADS: u64 = 4;
    const OPS: u64 = 50_000;
    // A per-thread xorshift stream of (label index, amount).
    let stream = |t: u64| {
        let mut x = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
        (0..OPS).map(move |_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % Request::COUNT as u64) as usize, x >> 60)
        })
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for (i, n) in stream(t) {
                    let r = Request::from_index(i).unwrap();
                    if n == 1 {
                        FAMILY.inc(r);
                    } else {
                        FAMILY.add(r, n);
                    }
                }
            });
        }
    });
    let mut reference: HashMap<Request, u64> = HashMap::new();
    for t in 0..THREADS {
        for (i, n) in stream(t) {
            *reference
                .entry(Request::from_index(i).unwrap())
                .or_default() += n;
        }
    }
    for (r, v) in FAMILY.snapshot() {
        assert_eq!(v, reference.get(&r).copied().unwrap_or(0), "{r:?}");
        assert_eq!(FAMILY.get(r), v);
    }
    assert_eq!(FAMILY.sum(), reference.values().sum::<u64>());
    let taken: u64 = FAMILY.take_all().iter().map(|&(_, v)| v).sum();
    assert_eq!(taken, reference.values().sum::<u64>());
    assert_eq!(FAMILY.sum(), 0);
}

/// Takes while threads add lose nothing: what was taken plus what is left
/// is everything added.
#[test]
fn takes_during_adds_are_lossless() {
    let family: LabelledCounter<(Method, Status)> = LabelledCounter::new();
    let label = (Method::Put, Status::NotFound);
    let taken = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| (0..100_000).for_each(|_| family.inc(label)));
        }
        let mut taken = 0;
        for _ in 0..1000 {
            taken += family.take(label);
        }
        taken
    });
    assert_eq!(taken + family.get(label), 200_000);
    assert_eq!(family.sum(), family.get(label));
}

/// A family never added to reads as zeros and visits every member, each
/// with its texts.
#[test]
fn an_untouched_family_reads_zeros_for_every_member() {
    let family: LabelledCounter<Request> = LabelledCounter::new();
    let mut seen = Vec::new();
    family.read_each_labels(|texts, v| seen.push((texts.join("/"), v)));
    assert_eq!(seen.len(), 12);
    assert_eq!(seen[0], ("get/ok".to_string(), 0));
    assert_eq!(seen[11], ("put/too_many_requests".to_string(), 0));
    let mut joined = Vec::new();
    family.read_each(|label, v| joined.push((label.to_string(), v)));
    assert_eq!(joined[1], ("get,5xx".to_string(), 0));
    assert_eq!(family.shards(), 0);
    family.reset();
    let r = Request {
        method: Method::Get,
        code: Status::Ok,
    };
    assert_eq!(family.take(r), 0);
}

/// A hand-written label whose index breaks its contract is a documented
/// panic naming the index, never a write out of bounds.
#[test]
fn an_index_past_count_panics_with_it() {
    struct Liar;
    impl Label for Liar {
        const COUNT: usize = 2;
        const NAMES: &'static [&'static str] = &["liar"];
        fn index(&self) -> usize {
            7
        }
        fn from_index(_: usize) -> Option<Self> {
            None
        }
        fn text(_: usize, _: usize) -> Option<&'static str> {
            None
        }
    }
    let family: LabelledCounter<Liar> = LabelledCounter::new();
    assert_eq!(family.get(Liar), 0);
    let err = std::panic::catch_unwind(|| family.inc(Liar)).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("returned 7") && msg.contains("COUNT is 2"),
        "{msg}"
    );
    assert_eq!(family.sum(), 0);
}

/// Inside a tuple or a derived struct, a member's index past its own
/// `COUNT` panics too: the combined index could still be below the
/// family's `COUNT`, and the add landed on another member's counter
/// (`(Left, Y)` counted as `(Right, X)`).
#[test]
fn a_members_index_past_its_count_panics_in_a_tuple_or_struct() {
    #[derive(Clone, Copy)]
    enum Short {
        X,
        Y,
    }
    impl Label for Short {
        const COUNT: usize = 1; // `Y` breaks the contract
        const NAMES: &'static [&'static str] = &["short"];
        fn index(&self) -> usize {
            *self as usize
        }
        fn from_index(i: usize) -> Option<Self> {
            (i == 0).then_some(Short::X)
        }
        fn text(i: usize, dim: usize) -> Option<&'static str> {
            (i == 0 && dim == 0).then_some("x")
        }
    }
    #[derive(Clone, Copy, Label)]
    enum Side {
        Left,
        Right,
    }
    #[derive(Clone, Copy, Label)]
    struct Pair {
        side: Side,
        short: Short,
    }
    let tuple: LabelledCounter<(Side, Short)> = LabelledCounter::new();
    let derived: LabelledCounter<Pair> = LabelledCounter::new();
    for err in [
        std::panic::catch_unwind(|| tuple.inc((Side::Left, Short::Y))).unwrap_err(),
        std::panic::catch_unwind(|| {
            derived.inc(Pair {
                side: Side::Left,
                short: Short::Y,
            })
        })
        .unwrap_err(),
    ] {
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("returned 1") && msg.contains("COUNT is 1"),
            "{msg}"
        );
    }
    assert_eq!((tuple.sum(), derived.sum()), (0, 0));
    tuple.inc((Side::Right, Short::X));
    assert_eq!(tuple.get((Side::Right, Short::X)), 1);
}
