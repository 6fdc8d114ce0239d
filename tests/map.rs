#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `CounterMap` on real threads and against a plain `HashMap` model: 8
//! threads adding to random keys match a sequential reference; takes racing
//! adds plus the final snapshot equal every add; a million distinct keys
//! under a bound allocate a bounded number of chunks; a `usize::MAX` bound
//! builds and counts exactly.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use shardcount::CounterMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const THREADS: u64 = 8;

fn plan(t: u64, keys: u64, ops: usize) -> Vec<(u64, u64)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x3a9 + t);
    (0..ops)
        .map(|_| (rng.gen_range(0..keys), rng.gen_range(1..100)))
        .collect()
}

fn reference(threads: u64, keys: u64, ops: usize) -> HashMap<u64, u64> {
    let mut want = HashMap::new();
    for t in 0..threads {
        for (k, v) in plan(t, keys, ops) {
            *want.entry(k).or_insert(0) += v;
        }
    }
    want
}

#[test]
fn eight_threads_random_keys_match_a_sequential_reference() {
    for keys in [1, 10, 1000] {
        let ops = 20_000;
        let m = CounterMap::new();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let m = &m;
                s.spawn(move || {
                    for (i, (k, v)) in plan(t, keys, ops).into_iter().enumerate() {
                        // Half by key, half through a fresh handle.
                        if i % 2 == 0 {
                            m.add(&k, v);
                        } else {
                            m.handle(&k).add(v);
                        }
                    }
                });
            }
        });
        let got: HashMap<u64, u64> = m.snapshot().into_iter().collect();
        let want = reference(THREADS, keys, ops);
        assert_eq!(got, want, "{keys} keys");
        assert_eq!(m.len(), want.len());
        for (k, v) in &want {
            assert_eq!(m.get(k), Some(*v));
        }
        assert_eq!(m.overflow(), 0);
    }
}

#[test]
fn takes_racing_adds_plus_the_final_snapshot_equal_all_adds() {
    let keys = 300; // three chunks
    let ops = 30_000;
    let m = CounterMap::new();
    let done = AtomicBool::new(false);
    let taken = std::thread::scope(|s| {
        let adders: Vec<_> = (0..THREADS - 1)
            .map(|t| {
                let m = &m;
                s.spawn(move || {
                    plan(t, keys, ops)
                        .into_iter()
                        .for_each(|(k, v)| m.add(&k, v))
                })
            })
            .collect();
        let taker = s.spawn(|| {
            let mut got: HashMap<u64, u64> = HashMap::new();
            let mut takes = 0;
            while !done.load(Ordering::Relaxed) || takes < 10 {
                for (k, v) in m.take_all() {
                    *got.entry(k).or_insert(0) += v;
                }
                takes += 1;
            }
            got
        });
        for a in adders {
            a.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        taker.join().unwrap()
    });
    let mut got = taken;
    for (k, v) in m.snapshot() {
        *got.entry(k).or_insert(0) += v;
    }
    got.retain(|_, v| *v != 0);
    assert_eq!(got, reference(THREADS - 1, keys, ops));
}

/// Adders on one key (by key and through a handle) while a taker takes it
/// by key and through a handle in turn: every add is in one take or stays.
#[test]
fn takes_of_one_key_racing_adds_lose_nothing() {
    const ADDS: u64 = 100_000;
    let m: CounterMap<String> = CounterMap::new();
    let h = m.handle("hot");
    let done = AtomicBool::new(false);
    let taken = std::thread::scope(|s| {
        let adders = [
            s.spawn(|| (0..ADDS).for_each(|_| h.inc())),
            s.spawn(|| (0..ADDS).for_each(|_| m.add("hot", 2))),
        ];
        let taker = s.spawn(|| {
            let (mut got, mut takes) = (0u64, 0u64);
            while !done.load(Ordering::Relaxed) || takes < 10 {
                got += if takes % 2 == 0 {
                    m.take("hot").unwrap()
                } else {
                    h.take()
                };
                takes += 1;
            }
            got
        });
        for a in adders {
            a.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        taker.join().unwrap()
    });
    assert_eq!(taken + m.get("hot").unwrap(), 3 * ADDS);
}

/// A million distinct keys under a bound of 1000: chunks stop at
/// ceil(1000 / 127), the rest is counted in the overflow, nothing lost.
#[test]
fn a_million_distinct_keys_under_a_bound_allocate_bounded_chunks() {
    let m = CounterMap::with_max_keys(1000);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let m = &m;
            s.spawn(move || (t * 250_000..(t + 1) * 250_000).for_each(|k| m.inc(&k)));
        }
    });
    assert_eq!(m.len(), 1000);
    assert_eq!(m.allocated_chunks(), 8); // ceil(1000 / 127)
    let kept: u64 = m.snapshot().iter().map(|&(_, v)| v).sum();
    assert_eq!(kept, 1000);
    assert_eq!(m.overflow(), 1_000_000 - 1000);
}

#[test]
fn a_hot_key_through_handles_grows_its_chunk_only_and_stays_exact() {
    let m = CounterMap::new();
    for k in 0..300u32 {
        m.inc(&k);
    }
    let h = m.handle(&200);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| (0..50_000).for_each(|_| h.inc()));
        }
    });
    assert_eq!(m.get(&200), Some(1 + THREADS * 50_000));
    assert_eq!(m.get(&199), Some(1));
}

/// What the integrations read (`CountFamily::read_each`) after an
/// eviction: each evicted key at its final total until the next
/// `evict_idle` call, added to its new counter if it came back, so that
/// the scrape after the eviction reports the increments before it; a key
/// that came back carries that total for as long as it stays, so its
/// series never falls.
#[test]
fn evicted_keys_are_read_at_their_final_totals_until_the_next_eviction() {
    use shardcount::contract::CountFamily;
    use std::time::Duration;
    let read = |m: &CounterMap<&'static str>| {
        let mut v = Vec::new();
        m.read_each(|k, n| v.push((*k, n)));
        v.sort_unstable();
        v
    };
    let m = CounterMap::new();
    m.add(&"a", 1);
    m.add(&"b", 1);
    assert_eq!(read(&m), [("a", 1), ("b", 1)]); // a scrape
    m.add(&"a", 2); // increments after it
    m.add(&"c", 5);
    assert!(m.evict_idle(Duration::ZERO).is_empty()); // notes every key
    m.add(&"c", 1);
    assert_eq!(m.evict_idle(Duration::ZERO), [("a", 3), ("b", 1)]);
    // The next scrape still reports a and b, at their final totals.
    assert_eq!(read(&m), [("a", 3), ("b", 1), ("c", 6)]);
    assert_eq!((m.get(&"a"), m.len()), (None, 1)); // gone from the map itself
                                                   // A key that comes back continues from its final total.
    m.add(&"b", 4);
    assert_eq!(read(&m), [("a", 3), ("b", 5), ("c", 6)]);
    // The next eviction pass lets a go; b, back, still carries its total.
    assert!(m.evict_idle(Duration::from_secs(3600)).is_empty());
    assert_eq!(read(&m), [("b", 5), ("c", 6)]);
    m.add(&"b", 1);
    assert_eq!(read(&m), [("b", 6), ("c", 6)]);
    assert_eq!(m.evict_idle(Duration::ZERO), [("c", 6)]); // b changed
    assert_eq!(read(&m), [("b", 6), ("c", 6)]);
    // Evicted again: b's own total returned, its series at both together.
    assert_eq!(m.evict_idle(Duration::ZERO), [("b", 5)]);
    assert_eq!((read(&m), m.len()), (vec![("b", 6)], 0));
    // Removed while back: its series ends, no fall to the carried total.
    m.add(&"b", 2);
    assert_eq!(read(&m), [("b", 8)]);
    assert_eq!(m.remove(&"b"), Some(2));
    assert_eq!(read(&m), []);
}

#[test]
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<CounterMap<String>>();
    check::<shardcount::CounterHandle<'static>>();
}

#[derive(Clone, Debug)]
enum Op {
    Add(u8, u64),
    HandleAdd(u8, u64),
    Sub(u8, u64),
    Dec(u8),
    Get(u8),
    HandleSum(u8),
    Take(u8),
    HandleTake(u8),
    Top(usize),
    TakeAll,
    TakeOverflow,
    Reset,
    Remove(u8),
    Retain(u64),
    Evict,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), any::<u64>()).prop_map(|(k, v)| Op::Add(k % 40, v)),
        3 => (any::<u8>(), 0..1000u64).prop_map(|(k, v)| Op::HandleAdd(k % 40, v)),
        2 => (any::<u8>(), 0..1000u64).prop_map(|(k, v)| Op::Sub(k % 40, v)),
        2 => any::<u8>().prop_map(|k| Op::Dec(k % 40)),
        2 => any::<u8>().prop_map(|k| Op::Get(k % 40)),
        1 => any::<u8>().prop_map(|k| Op::HandleSum(k % 40)),
        1 => any::<u8>().prop_map(|k| Op::Take(k % 40)),
        1 => any::<u8>().prop_map(|k| Op::HandleTake(k % 40)),
        1 => (0..24usize).prop_map(Op::Top),
        1 => Just(Op::TakeAll),
        1 => Just(Op::TakeOverflow),
        1 => Just(Op::Reset),
        2 => any::<u8>().prop_map(|k| Op::Remove(k % 40)),
        1 => (0..2000u64).prop_map(Op::Retain),
        1 => Just(Op::Evict),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against a `Vec` of (key, total) in first-use order plus an overflow
    /// total, with a bound of 0..20 keys; keys held by handles, and what
    /// the last eviction pass noted of each key.
    #[test]
    fn matches_a_plain_model(max in 0..20usize, ops in prop::collection::vec(op(), 0..64)) {
        let m = CounterMap::with_max_keys(max);
        let mut model: Vec<(u8, u64)> = Vec::new();
        let mut overflow = 0u64;
        let mut held = std::collections::HashSet::new();
        let mut noted: HashMap<u8, u64> = HashMap::new();
        let hold = |model: &Vec<(u8, u64)>, held: &mut std::collections::HashSet<u8>, k: u8| {
            if model.iter().any(|e| e.0 == k) {
                held.insert(k);
            }
        };
        let apply = |model: &mut Vec<(u8, u64)>, overflow: &mut u64, k: u8, v: u64| {
            match model.iter().position(|e| e.0 == k) {
                Some(at) => model[at].1 = model[at].1.wrapping_add(v),
                None if model.len() < max => model.push((k, v)),
                None => *overflow = overflow.wrapping_add(v),
            }
        };
        for op in ops {
            match op {
                Op::Add(k, v) => { m.add(&k, v); apply(&mut model, &mut overflow, k, v); }
                Op::HandleAdd(k, v) => {
                    m.handle(&k).add(v);
                    apply(&mut model, &mut overflow, k, v);
                    hold(&model, &mut held, k);
                }
                Op::Sub(k, v) => {
                    if v % 2 == 0 { m.handle(&k).sub(v) } else { m.sub(&k, v) }
                    apply(&mut model, &mut overflow, k, v.wrapping_neg());
                    if v % 2 == 0 { hold(&model, &mut held, k); }
                }
                Op::Dec(k) => {
                    if k % 2 == 0 { m.handle(&k).dec() } else { m.dec(&k) }
                    apply(&mut model, &mut overflow, k, u64::MAX);
                    if k % 2 == 0 { hold(&model, &mut held, k); }
                }
                Op::Get(k) => prop_assert_eq!(m.get(&k), model.iter().find(|e| e.0 == k).map(|e| e.1)),
                Op::HandleSum(k) => {
                    let h = m.handle(&k);
                    apply(&mut model, &mut overflow, k, 0); // a handle makes the key
                    hold(&model, &mut held, k);
                    let want = model.iter().find(|e| e.0 == k).map_or(overflow, |e| e.1);
                    prop_assert_eq!((h.sum(), h.sum_i64()), (want, want as i64));
                }
                Op::Take(k) => {
                    let at = model.iter().position(|e| e.0 == k);
                    prop_assert_eq!(m.take(&k), at.map(|at| model[at].1));
                    if let Some(at) = at { model[at].1 = 0; }
                }
                Op::HandleTake(k) => {
                    let h = m.handle(&k);
                    apply(&mut model, &mut overflow, k, 0);
                    hold(&model, &mut held, k);
                    match model.iter_mut().find(|e| e.0 == k) {
                        Some(e) => { prop_assert_eq!(h.take(), e.1); e.1 = 0; }
                        None => { prop_assert_eq!(h.take(), overflow); overflow = 0; }
                    }
                }
                Op::Reset => {
                    m.reset();
                    model.iter_mut().for_each(|e| e.1 = 0);
                    overflow = 0;
                }
                Op::Top(n) => {
                    // The model's largest totals, largest first; keys may
                    // differ only among equal totals.
                    let top = m.top(n);
                    let mut want: Vec<u64> = model.iter().map(|e| e.1).collect();
                    want.sort_unstable_by(|a, b| b.cmp(a));
                    want.truncate(n);
                    prop_assert_eq!(top.iter().map(|e| e.1).collect::<Vec<_>>(), want);
                    for e in &top {
                        prop_assert!(model.contains(e), "{:?} not in the map", e);
                    }
                    let mut keys: Vec<u8> = top.iter().map(|e| e.0).collect();
                    keys.sort_unstable();
                    keys.dedup();
                    prop_assert_eq!(keys.len(), top.len());
                }
                Op::TakeAll => {
                    prop_assert_eq!(m.take_all(), model.clone());
                    model.iter_mut().for_each(|e| e.1 = 0);
                }
                Op::TakeOverflow => {
                    prop_assert_eq!(m.take_overflow(), overflow);
                    overflow = 0;
                }
                Op::Remove(k) => {
                    let at = model.iter().position(|e| e.0 == k);
                    prop_assert_eq!(m.remove(&k), at.map(|at| model[at].1));
                    match at {
                        Some(at) if held.contains(&k) => model[at].1 = 0,
                        Some(at) => { model.remove(at); noted.remove(&k); }
                        None => {}
                    }
                }
                Op::Retain(least) => {
                    let mut seen = Vec::new();
                    m.retain(|&k, v| { seen.push((k, v)); v >= least });
                    prop_assert_eq!(seen, model.clone());
                    model.retain_mut(|e| {
                        if e.1 >= least { return true; }
                        e.1 = 0;
                        if held.contains(&e.0) { return true; }
                        noted.remove(&e.0);
                        false
                    });
                }
                Op::Evict => {
                    let mut gone = Vec::new();
                    model.retain(|&(k, v)| {
                        if held.contains(&k) { return true; }
                        if noted.get(&k) == Some(&v) { gone.push((k, v)); noted.remove(&k); return false; }
                        noted.insert(k, v);
                        true
                    });
                    prop_assert_eq!(m.evict_idle(std::time::Duration::ZERO), gone);
                }
            }
            prop_assert_eq!(m.snapshot(), model.clone());
            prop_assert_eq!(m.len(), model.len());
            prop_assert_eq!(m.overflow(), overflow);
        }
        prop_assert_eq!(m.overflow(), overflow);
        prop_assert_eq!(m.take_overflow(), overflow);
        prop_assert_eq!(m.overflow(), 0);
    }
}

/// A key whose `clone` panics (once) while being interned: the panic
/// reaches the caller, and the map stays whole: no index is left without
/// its key, later keys intern and count, and whole-map reads agree.
#[test]
fn a_key_clone_that_panics_leaves_the_map_whole() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PANIC_NEXT_CLONE: AtomicBool = AtomicBool::new(false);

    #[derive(PartialEq, Eq, Hash, Debug)]
    struct Touchy(u32);
    impl Clone for Touchy {
        fn clone(&self) -> Self {
            assert!(
                !PANIC_NEXT_CLONE.swap(false, Ordering::SeqCst),
                "clone refused"
            );
            Touchy(self.0)
        }
    }

    // Room for exactly the three keys: an index lost to the panic would
    // push the last key into the overflow, in any build.
    let m = CounterMap::with_max_keys(3);
    m.add(&Touchy(1), 1);
    PANIC_NEXT_CLONE.store(true, Ordering::SeqCst);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.add(&Touchy(2), 2)));
    assert!(r.is_err(), "the clone's panic reaches the caller");
    m.add(&Touchy(3), 3);
    m.add(&Touchy(2), 4);
    assert_eq!(m.len(), 3);
    assert_eq!(
        m.snapshot(),
        vec![(Touchy(1), 1), (Touchy(3), 3), (Touchy(2), 4)]
    );
    assert_eq!(m.take_all().iter().map(|(_, v)| v).sum::<u64>(), 8);
    assert_eq!(m.overflow(), 0);
}

/// Two threads adding the same new key to a map with room for one key: the
/// key gets the counter and nothing goes to the overflow, whichever thread
/// interns it. (A thread that missed the key and then saw the map full
/// once sent its add to the overflow though the key had its counter.)
#[test]
fn racing_first_adds_of_the_last_key_never_overflow() {
    use std::sync::atomic::{AtomicU32, Ordering};
    const MAPS: usize = 20_000;
    let maps: Vec<CounterMap<u32>> = (0..MAPS).map(|_| CounterMap::with_max_keys(1)).collect();
    // Both threads reach each map before either adds, so their first adds
    // of the key overlap as closely as the host lets them.
    let arrived: Vec<AtomicU32> = (0..MAPS).map(|_| AtomicU32::new(0)).collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (maps, arrived) = (&maps, &arrived);
            s.spawn(move || {
                for (m, a) in maps.iter().zip(arrived) {
                    // SeqCst: a rendezvous; nothing else is ordered by it.
                    a.fetch_add(1, Ordering::SeqCst);
                    let mut spins = 0u32;
                    while a.load(Ordering::SeqCst) < 2 {
                        spins += 1;
                        if spins.is_multiple_of(64) {
                            std::thread::yield_now();
                        }
                        std::hint::spin_loop();
                    }
                    m.add(&7, 1);
                }
            });
        }
    });
    let wrong = maps
        .iter()
        .filter(|m| (m.get(&7), m.overflow()) != (Some(2), 0))
        .count();
    assert_eq!(wrong, 0, "maps whose key's adds went to the overflow");
}

/// "No bound" asked for the natural way: constructing allocates nothing
/// sized by the bound (it once allocated a pointer per 127 possible keys
/// up front and aborted), and keys across several chunk segments (8, 16,
/// 32 chunks of 127) count exactly.
#[test]
fn with_max_keys_usize_max_builds_and_counts_exactly() {
    const KEYS: u64 = 5000; // 40 chunks: segments 0, 1 and 2
    let m = CounterMap::<u64>::with_max_keys(usize::MAX);
    assert_eq!(m.max_keys(), usize::MAX);
    for k in 0..KEYS {
        m.add(&k, k + 1);
    }
    m.add(&3, 10);
    m.inc(&(KEYS - 1));
    assert_eq!(m.len(), KEYS as usize);
    assert_eq!(m.allocated_chunks(), 40);
    assert_eq!(m.get(&0), Some(1));
    assert_eq!(m.get(&3), Some(14));
    assert_eq!(m.get(&1016), Some(1017)); // first key of segment 1
    assert_eq!(m.get(&(KEYS - 1)), Some(KEYS + 1));
    assert_eq!(m.get(&KEYS), None);
    assert_eq!(m.overflow(), 0);
    let total: u64 = m.snapshot().iter().map(|&(_, v)| v).sum();
    assert_eq!(total, KEYS * (KEYS + 1) / 2 + 11);
    let u = CounterMap::<u64>::unbounded();
    assert_eq!(u.max_keys(), usize::MAX);
}

/// A `CounterMap<&'static str>` takes a literal `&str` for every keyed
/// call (not `&"/"`), and reads take any `&str`, borrowed from a `String`
/// too.
#[test]
fn static_str_keys_take_literals() {
    let routes: CounterMap<&'static str> = CounterMap::new();
    routes.handle("/").inc();
    routes.add("/", 2);
    routes.inc(&"/about"); // the old spelling still works
    routes.sub("/about", 1);
    routes.dec("/");
    let asked = String::from("/");
    assert_eq!(routes.get(asked.as_str()), Some(2));
    assert_eq!((routes.get("/about"), routes.take("/")), (Some(0), Some(2)));
    assert_eq!(routes.snapshot(), [("/", 0), ("/about", 0)]);
}

/// A `CounterMap<String>` takes `&str` for every keyed call, and a key is
/// made owned only when it is inserted (counted through a borrowed form
/// whose `IntoKey` counts its calls).
#[test]
fn keyed_calls_take_a_borrowed_form_and_own_the_key_only_when_new() {
    let paths = CounterMap::<String>::new();
    paths.inc("/about");
    paths.add("/about", 4);
    paths.sub("/about", 2);
    paths.handle("/").add(7);
    assert_eq!(paths.get("/about"), Some(3));
    assert_eq!(paths.get(&"/".to_string()), Some(7));
    assert_eq!(paths.len(), 2);

    use std::borrow::Borrow;
    use std::sync::atomic::AtomicUsize;
    static OWNED: AtomicUsize = AtomicUsize::new(0);
    /// The borrowed form; not `Clone`, so its `IntoKey` is this one.
    #[derive(PartialEq, Eq, Hash, Debug)]
    struct Id(u32);
    /// The owned key: hashes and compares as its `Id` (derived through
    /// its only field), as `Borrow` requires.
    #[derive(PartialEq, Eq, Hash, Debug)]
    struct Key(Id);
    impl Clone for Key {
        fn clone(&self) -> Self {
            Key(Id(self.0 .0))
        }
    }
    impl Borrow<Id> for Key {
        fn borrow(&self) -> &Id {
            &self.0
        }
    }
    // How the map makes a `Key` from a lookup's `&Id` when it is new.
    impl shardcount::IntoKey<Key> for &Id {
        fn into_key(self) -> Key {
            OWNED.fetch_add(1, Ordering::Relaxed);
            Key(Id(self.0))
        }
    }

    let m = CounterMap::<Key>::with_max_keys(2);
    for _ in 0..100 {
        m.inc(&Id(1));
        m.add(&Id(2), 2);
        m.handle(&Id(1)).inc();
        m.sub(&Id(2), 1);
    }
    assert_eq!(
        OWNED.load(Ordering::Relaxed),
        2,
        "keys owned beyond their insertion"
    );
    // Beyond the bound: counted in the overflow, never owned.
    m.add(&Id(3), 5);
    assert_eq!(OWNED.load(Ordering::Relaxed), 2);
    assert_eq!(
        (m.get(&Id(1)), m.get(&Id(2)), m.get(&Id(3))),
        (Some(200), Some(100), None)
    );
    assert_eq!(m.overflow(), 5);
    assert_eq!(m.top(1), vec![(Key(Id(1)), 200)]);
}

/// `top` on real threads: at quiescence, the largest totals, largest
/// first, whatever the order keys were first used in.
#[test]
fn top_after_threads_is_the_largest_totals_largest_first() {
    let m = CounterMap::<u64>::unbounded();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let m = &m;
            // Key k gets k + 1 adds from each thread, keys in a thread-chosen
            // order so first use is mixed.
            s.spawn(move || {
                for k in (0..300u64).map(|k| (k * 7 + t * 13) % 300) {
                    (0..=k).for_each(|_| m.inc(&k));
                }
            });
        }
    });
    let top = m.top(5);
    assert_eq!(
        top,
        vec![
            (299, 4 * 300),
            (298, 4 * 299),
            (297, 4 * 298),
            (296, 4 * 297),
            (295, 4 * 296)
        ]
    );
    assert_eq!(m.top(1000).len(), 300);
    assert_eq!(m.top(1000)[299], (0, 4));
}

/// Four threads add the same 3,000 new URL keys in the same order at the
/// same time (released together, so they race on every first insert and
/// on each growth of the index), then by key again in another order: one
/// counter per key, every add counted, as a sequential reference says.
#[test]
fn threads_interning_the_same_new_keys_at_once_match_a_sequential_reference() {
    const KEYS: u64 = 3000;
    const THREADS: u64 = 4;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("/page/{i}")).collect();
    let m: CounterMap<String> = CounterMap::new();
    let start = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (m, keys, start) = (&m, &keys, &start);
            s.spawn(move || {
                start.wait();
                for (i, k) in keys.iter().enumerate() {
                    m.add(k, i as u64 % 7 + 1);
                }
                for k in keys.iter().rev().step_by(t as usize + 1) {
                    m.inc(k.as_str());
                }
            });
        }
    });
    let mut want: HashMap<String, u64> = HashMap::new();
    for t in 0..THREADS {
        for (i, k) in keys.iter().enumerate() {
            *want.entry(k.clone()).or_default() += i as u64 % 7 + 1;
        }
        for k in keys.iter().rev().step_by(t as usize + 1) {
            *want.entry(k.clone()).or_default() += 1;
        }
    }
    assert_eq!(m.len(), KEYS as usize);
    let got: HashMap<String, u64> = m.snapshot().into_iter().collect();
    assert_eq!(got, want);
    for k in &keys {
        assert_eq!(m.get(k.as_str()), want.get(k).copied());
    }
    assert_eq!(m.overflow(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// String keys by `&str` against a plain `HashMap`, over enough keys
    /// to grow the index several times, with a bound: every key's total,
    /// the key count, the overflow and whole-map reads agree.
    #[test]
    fn string_keys_match_a_hash_map(
        max in 0..300usize,
        ops in prop::collection::vec((0..400u32, 0..5u64, any::<bool>()), 0..800),
    ) {
        let m: CounterMap<String> = CounterMap::with_max_keys(max);
        let mut model: HashMap<String, u64> = HashMap::new();
        let mut overflow = 0u64;
        for (k, v, by_get) in ops {
            let key = format!("/u/{k}");
            if by_get {
                prop_assert_eq!(m.get(key.as_str()), model.get(&key).copied());
                continue;
            }
            m.add(key.as_str(), v);
            let len = model.len();
            match model.get_mut(&key) {
                Some(n) => *n += v,
                None if len < max => { model.insert(key, v); }
                None => overflow += v,
            }
        }
        prop_assert_eq!(m.len(), model.len());
        prop_assert_eq!(m.overflow(), overflow);
        let got: HashMap<String, u64> = m.snapshot().into_iter().collect();
        prop_assert_eq!(got, model.clone());
        for (k, v) in &model {
            prop_assert_eq!(m.get(k.as_str()), Some(*v));
        }
    }
}

/// A key type whose hash ignores its data, so every key collides, and
/// whose `eq` counts the comparisons made: holds the "Hostile keys" bound
/// to the code.
#[derive(Clone, Debug, Eq)]
struct Colliding(u32);

static COMPARISONS: AtomicU64 = AtomicU64::new(0);

impl std::hash::Hash for Colliding {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u8(0);
    }
}

impl PartialEq for Colliding {
    fn eq(&self, other: &Self) -> bool {
        COMPARISONS.fetch_add(1, Ordering::Relaxed);
        self.0 == other.0
    }
}

#[test]
fn keys_that_share_a_hash_cost_at_most_twice_max_keys_comparisons() {
    const MAX: usize = 64;
    let m: CounterMap<Colliding> = CounterMap::with_max_keys(MAX);
    for i in 0..MAX as u32 {
        m.inc(&Colliding(i));
    }
    let count = |key: u32| {
        let before = COMPARISONS.load(Ordering::Relaxed);
        m.inc(&Colliding(key));
        COMPARISONS.load(Ordering::Relaxed) - before
    };
    let past_the_bound = count(1_000);
    assert!(past_the_bound <= 2 * MAX as u64, "{past_the_bound}");
    assert!(
        past_the_bound > MAX as u64,
        "it looks twice: {past_the_bound}"
    );
    assert!(count(MAX as u32 - 1) <= MAX as u64);
    assert_eq!((m.overflow(), m.len()), (1, MAX));
}

/// Two threads add by key to 1,024 keys (8 chunks; and to one more key
/// through handles they hold) while a third, for 200 rounds and until
/// they made 400,000 adds, removes two keys in three and evicts: keys are unlinked, freed, made afresh, and
/// moved by compaction as chunks go sparse, all under the adds. What the
/// removals returned plus what is left equals every add.
#[test]
fn removals_racing_adds_lose_nothing_and_count_nothing_twice() {
    const KEYS: u64 = 1024;
    let m: CounterMap<u64> = CounterMap::unbounded();
    let done = AtomicBool::new(false);
    let progress = AtomicU64::new(0);
    let (added, removed, sparse) = std::thread::scope(|s| {
        let adders: Vec<_> = (0..2u64)
            .map(|t| {
                let (m, done, progress) = (&m, &done, &progress);
                s.spawn(move || {
                    let held = m.handle(&KEYS);
                    let mut added = 0;
                    for i in 0u64.. {
                        if i % 1024 == 0 {
                            if done.load(Ordering::Relaxed) {
                                break;
                            }
                            progress.fetch_add(1024, Ordering::Relaxed);
                        }
                        m.inc(&((i * 7 + t * 500) % KEYS));
                        added += 1;
                        if i % 16 == 0 {
                            held.add(2);
                            added += 2;
                        }
                    }
                    added
                })
            })
            .collect();
        let (mut removed, mut sparse) = (0u64, 0u64);
        let mut round = 0;
        while round < 200 || progress.load(Ordering::Relaxed) < 400_000 {
            round += 1;
            for k in (0..KEYS).filter(|k| k % 3 != round % 3) {
                removed += m.remove(&k).unwrap_or(0);
            }
            removed += m.remove(&KEYS).unwrap_or(0); // held: a take
            if m.allocated_chunks() < 8 {
                sparse += 1; // compaction freed chunks
            }
            removed += m
                .evict_idle(std::time::Duration::ZERO)
                .iter()
                .map(|e| e.1)
                .sum::<u64>();
        }
        done.store(true, Ordering::Relaxed);
        let added: u64 = adders.into_iter().map(|a| a.join().unwrap()).sum();
        (added, removed, sparse)
    });
    let left: u64 = m.snapshot().iter().map(|e| e.1).sum();
    eprintln!("added {added}, removed {removed}, left {left}, sparse rounds {sparse}");
    assert_eq!(left + removed, added);
    assert!(m.get(&KEYS).is_some(), "a held key stays");
    // Chunks freed in some round: compaction ran under the adds.
    assert!(sparse > 0, "no round saw chunks freed");
}

/// Removing 9 keys in 10, scattered over every chunk, moves the rest into
/// few chunks and frees the others; every total stays exact, and new keys
/// reuse the freed slots.
#[test]
fn scattered_removals_compact_chunks_and_keep_totals() {
    let m: CounterMap<u32> = CounterMap::unbounded();
    for k in 0..10_000u32 {
        m.add(&k, u64::from(k) + 1);
    }
    let held = m.handle(&9_999); // in the last chunk: stays there
    assert_eq!(m.allocated_chunks(), 79);
    m.retain(|&k, _| k % 10 == 0 || k == 9_999);
    assert_eq!(m.len(), 1_001);
    // 1,001 keys fill 8 chunks; the held key keeps its own.
    assert_eq!(m.allocated_chunks(), 9);
    for k in (0..10_000u32).step_by(10) {
        assert_eq!(m.get(&k), Some(u64::from(k) + 1), "key {k}");
    }
    held.inc();
    assert_eq!(m.get(&9_999), Some(10_001));
    for k in 20_000..21_000u32 {
        m.inc(&k);
    }
    assert_eq!(m.allocated_chunks(), 17);
    m.retain(|&k, _| k == 9_999);
    assert_eq!((m.len(), m.allocated_chunks()), (1, 1));
    assert_eq!(m.snapshot(), vec![(9_999, 10_001)]);
}

/// Slot bookkeeping across many chunks (the property test stays within
/// one): random adds, removes, retains and handles over 3,000 keys (24
/// chunks), against a `HashMap`; with every key removed at the end, only
/// held keys keep chunks.
#[test]
fn random_multi_chunk_churn_matches_a_hash_map() {
    use std::collections::{HashMap, HashSet};
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..6 {
        let m: CounterMap<u32> = CounterMap::unbounded();
        let mut model: HashMap<u32, u64> = HashMap::new();
        let mut held: HashSet<u32> = HashSet::new();
        for _ in 0..20_000 {
            let k = (rnd() % 3000) as u32;
            match rnd() % 100 {
                0..=59 => {
                    m.add(&k, 1);
                    *model.entry(k).or_default() += 1;
                }
                60..=89 => {
                    let got = m.remove(&k);
                    let want = if held.contains(&k) {
                        model.get_mut(&k).map(std::mem::take)
                    } else {
                        model.remove(&k)
                    };
                    assert_eq!(got, want, "round {round} remove {k}");
                }
                90..=90 => {
                    if rnd() % 20 == 0 {
                        m.handle(&k).add(1);
                        *model.entry(k).or_default() += 1;
                        held.insert(k);
                    }
                }
                91..=92 => {
                    let r = rnd() % 5;
                    m.retain(|&k, _| k as u64 % 5 != r);
                    model.retain(|&k, v| {
                        if k as u64 % 5 != r {
                            true
                        } else if held.contains(&k) {
                            *v = 0;
                            true
                        } else {
                            false
                        }
                    });
                }
                _ => {
                    assert_eq!(m.get(&k), model.get(&k).copied());
                }
            }
        }
        let mut snap = m.snapshot();
        snap.sort();
        let mut want: Vec<_> = model.into_iter().collect();
        want.sort();
        assert_eq!(snap, want, "round {round}");
        m.retain(|_, _| false);
        assert_eq!(m.len(), held.len());
        assert!(
            m.allocated_chunks() <= held.len().max(1),
            "round {round}: {} chunks for {} held keys",
            m.allocated_chunks(),
            held.len()
        );
    }
}

/// A handle taken while the map was full is the overflow counter's; once
/// a removal makes room, adds by key give the key its own counter, while
/// the handle keeps counting into the overflow (as `handle` documents).
#[test]
fn an_overflow_handle_outlives_the_room_a_removal_makes() {
    let m = CounterMap::with_max_keys(1);
    m.add(&"a", 1);
    let h = m.handle(&"b"); // full: the overflow counter
    assert_eq!(m.remove(&"a"), Some(1));
    m.add(&"b", 1); // room now: "b" gets its own counter
    h.add(5);
    eprintln!("get(b) = {:?}, overflow = {}", m.get(&"b"), m.overflow());
    assert_eq!((m.get(&"b"), m.overflow()), (Some(1), 5)); // documents the split
}

/// A key type whose `drop` panics once, for the key named in
/// `PANIC_DROP_OF` (on this thread).
mod touchy {
    use std::cell::Cell;

    thread_local! {
        pub static PANIC_DROP_OF: Cell<Option<u32>> = const { Cell::new(None) };
    }

    #[derive(PartialEq, Eq, Hash, Debug, Clone)]
    pub struct K(pub u32);

    impl Drop for K {
        fn drop(&mut self) {
            if PANIC_DROP_OF.with(|p| p.get()) == Some(self.0) {
                PANIC_DROP_OF.with(|p| p.set(None));
                if !std::thread::panicking() {
                    panic!("drop refused");
                }
            }
        }
    }
}

/// A key's `drop` that panics while `retain` removes keys scattered over
/// four chunks (so compaction moves the rest): the panic reaches the
/// caller only after the map is whole. Every kept key keeps its count and
/// every removed key is gone; the chunks emptied are freed.
#[test]
fn a_key_drop_that_panics_in_a_removal_leaves_the_map_whole() {
    use touchy::{K, PANIC_DROP_OF};
    let m: CounterMap<K> = CounterMap::unbounded();
    for k in 0..508 {
        m.add(&K(k), 1); // four full chunks
    }
    PANIC_DROP_OF.with(|p| p.set(Some(491)));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.retain(|k, _| k.0 % 10 == 0)
    }));
    PANIC_DROP_OF.with(|p| p.set(None));
    assert!(r.is_err(), "the drop's panic reaches the caller");
    assert_eq!(m.len(), 51);
    for k in 0..508 {
        let want = (k % 10 == 0).then_some(1);
        assert_eq!(m.get(&K(k)), want, "key {k}");
    }
    assert_eq!(
        m.allocated_chunks(),
        1,
        "compaction ran before the keys' drops"
    );
}

/// Evictions on three threads at once while a fourth thread adds: with an
/// idle time of an hour nothing may be evicted (the times each pass notes
/// are read under the lock, so they never go back).
#[test]
fn racing_evictions_with_an_hour_idle_evict_nothing() {
    use std::time::{Duration, Instant};
    let m: CounterMap<u32> = CounterMap::unbounded();
    for k in 0..2000 {
        m.add(&k, 1);
    }
    let stop = AtomicBool::new(false);
    let until = Instant::now() + Duration::from_millis(300);
    let evicted: usize = std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                m.add(&(i % 2000), 1);
                i = i.wrapping_add(7);
            }
        });
        let evictors: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while Instant::now() < until {
                        n += m.evict_idle(Duration::from_secs(3600)).len();
                    }
                    n
                })
            })
            .collect();
        let n = evictors.into_iter().map(|e| e.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        n
    });
    assert_eq!(evicted, 0);
    assert_eq!(m.len(), 2000);
}

/// A key whose `Eq` (run inside the lock-free lookup's pinned section)
/// removes a key of another map: the removal's grace period would wait
/// for the very section it runs in. It panics, naming the likely cause,
/// instead of hanging the process. (New keys added from there count in
/// the other map's overflow instead: `tests/map_panics.rs`.)
#[test]
fn a_grace_period_from_inside_a_lookup_panics_instead_of_hanging() {
    use std::sync::atomic::AtomicU32;
    use std::sync::OnceLock;
    static OTHER: OnceLock<CounterMap<u32>> = OnceLock::new();
    static N: AtomicU32 = AtomicU32::new(0);
    #[derive(Clone, Debug)]
    struct Logged(u32);
    impl std::hash::Hash for Logged {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.0.hash(h);
        }
    }
    impl PartialEq for Logged {
        fn eq(&self, o: &Self) -> bool {
            OTHER
                .get_or_init(CounterMap::unbounded)
                .remove(&N.fetch_add(1, Ordering::Relaxed));
            self.0 == o.0
        }
    }
    impl Eq for Logged {}
    for k in 0..64 {
        OTHER.get_or_init(CounterMap::unbounded).inc(&k);
    }
    let r = std::thread::spawn(|| {
        let m: CounterMap<Logged> = CounterMap::new();
        m.inc(&Logged(1));
        for _ in 0..64 {
            m.inc(&Logged(1));
        }
    })
    .join();
    let e = r.expect_err("a grace period ran inside a pinned section");
    let msg = e
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap();
    assert!(msg.contains("inside a pinned section"), "{msg}");
}

/// The same misuse from a thread-local destructor that runs after the
/// crate's own per-thread word is gone (its lookups pin on a shared
/// striped counter): the removal inside the key's `Eq` panics, where it
/// used to spin for ever holding the process's grace-period lock, and the
/// map it would have changed is left whole.
#[test]
fn a_grace_period_from_inside_a_lookup_in_a_thread_local_destructor_panics() {
    use std::sync::atomic::AtomicU8;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};
    static OTHER: OnceLock<CounterMap<u32>> = OnceLock::new();
    /// 0 while the destructor runs, 1 when the lookup panicked naming the
    /// cause, 2 when it returned.
    static OUTCOME: AtomicU8 = AtomicU8::new(0);
    #[derive(Clone, Debug)]
    struct Removing(u32);
    impl std::hash::Hash for Removing {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.0.hash(h);
        }
    }
    impl PartialEq for Removing {
        fn eq(&self, o: &Self) -> bool {
            OTHER.get().unwrap().remove(&7);
            self.0 == o.0
        }
    }
    impl Eq for Removing {}
    struct AtExit;
    impl Drop for AtExit {
        fn drop(&mut self) {
            let r = std::panic::catch_unwind(|| {
                let m: CounterMap<Removing> = CounterMap::new();
                m.inc(&Removing(1));
                m.inc(&Removing(1));
            });
            let named = r.as_ref().is_err_and(|e| {
                e.downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned())
                    .is_some_and(|m| m.contains("inside a pinned section"))
            });
            OUTCOME.store(if named { 1 } else { 2 }, Ordering::Release);
        }
    }
    std::thread_local! {
        static AT_EXIT: AtExit = const { AtExit };
    }
    OTHER.get_or_init(CounterMap::new).add(&7, 5);
    std::thread::spawn(|| {
        // Registered first, so destroyed after the crate's thread-locals,
        // which this map's lookups register.
        AT_EXIT.with(|_| {});
        let m: CounterMap<u32> = CounterMap::new();
        m.inc(&1);
        assert_eq!(m.get(&1), Some(1));
    });
    let until = Instant::now() + Duration::from_secs(20);
    while OUTCOME.load(Ordering::Acquire) == 0 {
        assert!(Instant::now() < until, "the removal hangs");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        OUTCOME.load(Ordering::Acquire),
        1,
        "no panic naming the cause"
    );
    assert_eq!(OTHER.get().unwrap().get(&7), Some(5), "the map changed");
}
