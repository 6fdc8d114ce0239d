//! `CounterMap` calls whose caller sees a panic from a key's own code
//! (`Clone`, `Hash`): nothing taken may vanish with it, and the map is left
//! as it was.
#![cfg(not(shardcount_loom))]

use shardcount::{CountFamily, CounterMap};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

std::thread_local! {
    /// This thread's keys' `clone` panics while set.
    static CLONE_PANICS: Cell<bool> = const { Cell::new(false) };
    /// This thread's `hash` of the key with this number panics (0: none).
    static HASH_PANICS_FOR: Cell<u32> = const { Cell::new(0) };
}

/// A key whose `clone` or `hash` panics on demand (on the thread that
/// asked).
#[derive(PartialEq, Eq, Debug)]
struct Key(u32);

impl Clone for Key {
    fn clone(&self) -> Self {
        assert!(!CLONE_PANICS.get(), "clone of {self:?}");
        Key(self.0)
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        assert!(HASH_PANICS_FOR.get() != self.0, "hash of {self:?}");
        self.0.hash(h);
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Runs `f` with `set` switched on, and checks that it panicked.
fn panics_with<T>(set: impl Fn(bool), f: impl FnOnce() -> T) {
    set(true);
    let r = catch_unwind(AssertUnwindSafe(f));
    set(false);
    assert!(r.is_err(), "the key's code did not panic");
}

/// What the integrations report: the map's keys and the departed ones.
fn reported(m: &CounterMap<Key>) -> u64 {
    let mut sum = 0;
    m.read_each(|_, v| sum += v);
    sum
}

/// `take_all` clones the keys it returns before it swaps any counter: a
/// key's `clone` that panics must not drop the taken counts on the floor.
#[test]
fn a_key_clone_panicking_in_take_all_loses_nothing() {
    let m: CounterMap<Key> = CounterMap::new();
    m.add(&Key(1), 5);
    panics_with(|on| CLONE_PANICS.set(on), || m.take_all());
    assert_eq!(m.get(&Key(1)), Some(5), "the 5 taken went nowhere");
}

/// `evict_idle`, `remove` and `retain` run the keys' code (the departed
/// list's clones and hashes) before they change the map: a panic there
/// leaves every key, total and departed key as it was, and the call
/// repeated without the panic does what it would have done.
#[test]
fn a_key_panicking_in_a_removal_leaves_the_map_as_it_was() {
    let m: CounterMap<Key> = CounterMap::new();
    m.add(&Key(90), 7);
    m.add(&Key(1), 5);
    m.add(&Key(2), 3);
    assert!(m.evict_idle(Duration::ZERO).is_empty()); // notes every key
    m.add(&Key(1), 1);
    m.add(&Key(2), 1);
    panics_with(|on| CLONE_PANICS.set(on), || m.evict_idle(Duration::ZERO));
    assert_eq!((m.get(&Key(90)), reported(&m)), (Some(7), 17));
    // (That call noted the new totals: moved again, they stay.)
    m.add(&Key(1), 1);
    m.add(&Key(2), 1);
    assert_eq!(m.evict_idle(Duration::ZERO), [(Key(90), 7)]);
    // Key(90) departed: its 7 is still reported, and hashed by removals.
    let hash_90 = |on| HASH_PANICS_FOR.set(if on { 90 } else { 0 });
    panics_with(hash_90, || m.remove(&Key(1)));
    assert_eq!((m.get(&Key(1)), reported(&m)), (Some(7), 19));
    panics_with(hash_90, || m.retain(|k, _| k.0 != 2));
    assert_eq!((m.get(&Key(2)), reported(&m)), (Some(5), 19));
    assert_eq!(m.remove(&Key(1)), Some(7));
    m.retain(|k, _| k.0 != 2);
    assert_eq!((m.len(), reported(&m)), (0, 7), "only the departed 7 left");
}

/// A removal or a whole-map read of a map from inside a call on the same
/// map (a `read_each` or `retain` closure) would wait for the lock that
/// call holds: it panics instead, leaving the map as it was.
#[test]
fn a_removal_from_inside_a_call_on_the_same_map_panics_instead_of_hanging() {
    let m = std::sync::Arc::new(CounterMap::<Key>::new());
    m.add(&Key(1), 0);
    m.add(&Key(2), 3);
    let (tx, rx) = std::sync::mpsc::channel();
    // Detached: a hang fails the test at the timeout, and the thread is
    // left behind rather than joined.
    let there = std::sync::Arc::clone(&m);
    std::thread::spawn(move || {
        let m = &*there;
        let removed = catch_unwind(AssertUnwindSafe(|| {
            m.read_each(|k, v| {
                if v == 0 {
                    m.remove(k);
                }
            })
        }));
        let read = catch_unwind(AssertUnwindSafe(|| m.retain(|_, _| m.snapshot().len() > 1)));
        tx.send((removed.is_err(), read.is_err())).unwrap();
    });
    let got = rx.recv_timeout(Duration::from_secs(60));
    assert_eq!(got, Ok((true, true)), "both calls panic");
    assert_eq!((m.get(&Key(1)), m.get(&Key(2))), (Some(0), Some(3)));
}

/// The other map a `Noisy` key's `eq` adds to.
static OTHER: std::sync::LazyLock<CounterMap<u64>> = std::sync::LazyLock::new(CounterMap::new);

std::thread_local! {
    /// The next fresh key a `Noisy` key's `eq` adds to `OTHER`.
    static FRESH: Cell<u64> = const { Cell::new(0) };
}

/// A key whose `eq` adds 100 new keys to `OTHER`.
#[derive(Clone)]
struct Noisy(u32);

impl std::hash::Hash for Noisy {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h);
    }
}

impl PartialEq for Noisy {
    fn eq(&self, other: &Self) -> bool {
        for _ in 0..100 {
            let k = FRESH.replace(FRESH.get() + 1);
            OTHER.add(&k, 1);
        }
        self.0 == other.0
    }
}

impl Eq for Noisy {}

/// A key's `eq` runs inside a lookup's pinned section; its adds to
/// another map's new keys (enough to grow that map's table, which waits
/// for a grace period) count in that map's overflow. Interning there
/// panicked (a grace period inside a pinned section), and across threads
/// could wait for a lock whose holder waits for this section.
#[test]
fn new_keys_added_from_a_keys_eq_count_in_the_overflow() {
    let m: CounterMap<Noisy> = CounterMap::new();
    m.add(&Noisy(1), 1); // interned: no `eq`
    for _ in 0..20 {
        m.add(&Noisy(1), 1); // found by hash, compared with `eq`
    }
    let mut other = 0;
    OTHER.read_each(|_, v| other += v);
    assert_eq!(
        (m.get(&Noisy(1)), other + OTHER.overflow()),
        (Some(21), FRESH.get())
    );
    assert!(FRESH.get() >= 2000, "eq ran: {}", FRESH.get());
}

/// The map a `Reentrant` key's `eq` reads and removes from.
static READ: std::sync::LazyLock<CounterMap<u64>> = std::sync::LazyLock::new(CounterMap::new);

std::thread_local! {
    /// How many of a `Reentrant` key's calls into `READ` panicked.
    static REFUSED: Cell<u32> = const { Cell::new(0) };
}

/// A key whose `eq` takes a whole-map read of `READ`, then a removal.
#[derive(Clone)]
struct Reentrant(u32);

impl std::hash::Hash for Reentrant {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h);
    }
}

impl PartialEq for Reentrant {
    fn eq(&self, other: &Self) -> bool {
        let calls: [fn(); 2] = [
            || {
                let _ = READ.snapshot();
            },
            || {
                let _ = READ.remove(&1);
            },
        ];
        for call in calls {
            if catch_unwind(call).is_err() {
                REFUSED.set(REFUSED.get() + 1);
            }
        }
        self.0 == other.0
    }
}

impl Eq for Reentrant {}

/// A whole-map read or a removal from a key's `eq` (inside a lookup's
/// pinned section), of any map, panics: it takes a map's lock, whose
/// holder may be waiting in a removal's grace period for this very
/// section (two threads hung so). Alone, it used to run.
#[test]
fn a_whole_map_read_or_removal_from_a_keys_eq_panics() {
    READ.add(&1, 1);
    let m: CounterMap<Reentrant> = CounterMap::new();
    m.add(&Reentrant(1), 1); // interned: no `eq`
    m.add(&Reentrant(1), 1); // found by hash, compared with `eq`
    assert_eq!(REFUSED.get(), 2);
    assert_eq!((m.get(&Reentrant(1)), READ.get(&1)), (Some(2), Some(1)));
}
