//! The contract traits (`contract.rs`) on every counter type.

// The macro's key type takes the static's name; inside this crate clippy
// sees it as an acronym.
#![allow(clippy::upper_case_acronyms)]

use crate::contract::{Count, CountFamily, Kind};
use crate::{Counter, CounterMap, CounterSet, MaxCounter, MinCounter, RoughCounter, Stock};

crate::local_counter!(static LOCAL);

/// Each read is the type's own exact read, and the kinds are right.
#[test]
fn reads_and_kinds() {
    let c = Counter::new();
    c.add(2);
    let r = RoughCounter::new().with_batch(1000);
    r.add(3); // not folded: `approx` would say 0
    LOCAL.add(4);
    LOCAL.add(1);
    let (max, min) = (MaxCounter::new(), MinCounter::new());
    max.record(9);
    min.record(6);
    let s = Stock::new(8);
    s.try_sub(1).unwrap();
    assert_eq!(
        [
            c.read(),
            r.read(),
            LOCAL.read(),
            max.read(),
            min.read(),
            s.read()
        ],
        [2, 3, 5, 9, 6, 7]
    );
    assert_eq!(
        [
            Counter::KIND,
            RoughCounter::KIND,
            <crate::LocalCounter<LOCAL> as Count>::KIND
        ],
        [Kind::Counter; 3]
    );
    assert_eq!(
        [MaxCounter::KIND, MinCounter::KIND, Stock::KIND],
        [Kind::Gauge; 3]
    );
}

#[test]
fn families_visit_every_member_once() {
    let set = CounterSet::new(3);
    set.add(2, 7);
    let mut got = Vec::new();
    set.read_each(|i, v| got.push((*i, v)));
    assert_eq!(got, [(0, 0), (1, 0), (2, 7)]);

    let map: CounterMap<String> = CounterMap::with_max_keys(200);
    for k in 0..150u64 {
        map.add(&format!("k{k}"), k); // two chunks
    }
    let mut got = Vec::new();
    map.read_each(|k, v| got.push((k.clone(), v)));
    got.sort_by_key(|&(_, v)| v);
    assert_eq!(got.len(), 150);
    assert!(got.iter().all(|(k, v)| *k == format!("k{v}")));
    assert_eq!(
        (CounterSet::MEMBER_KIND, CounterSet::LABEL_NAME),
        (Kind::Counter, Some("index"))
    );
}
