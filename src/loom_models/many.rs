//! Loom models of `CounterSet` (`src/set.rs`) and `MaxCounter` /
//! `MinCounter` (`src/accumulator.rs`). Under loom every add is sampled, so
//! interleavings with another writer grow rows inside the model.

use super::thread;
use crate::shard::GrowOnce;
use crate::{CounterSet, MaxCounter, MinCounter};
use loom::sync::Arc;

/// Adds to two counters of a set racing two row allocations (base → 2 rows
/// → 4 rows): every count lands in some row that reads visit.
#[test]
fn set_add_racing_row_allocation() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(3, 4));
        let grower = {
            let s = s.clone();
            thread::spawn(move || {
                s.grow_once();
                s.grow_once();
            })
        };
        let adder = {
            let s = s.clone();
            thread::spawn(move || {
                s.add(0, 5);
                s.add(2, 7);
            })
        };
        s.add(2, 1);
        grower.join().unwrap();
        adder.join().unwrap();
        assert_eq!(s.shards(), 4);
        assert_eq!(s.snapshot(), vec![5, 0, 8]);
    });
}

/// Two threads adding to the same counter on the base: interference grows
/// rows inside the model, and no count is lost across the switch.
#[test]
fn set_racing_adds_grow_without_loss() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(2, 2));
        let other = {
            let s = s.clone();
            thread::spawn(move || {
                s.add(1, 10);
                s.add(0, 1);
            })
        };
        s.add(1, 1);
        other.join().unwrap();
        assert_eq!(s.snapshot(), vec![1, 11]);
    });
}

/// `take_all` racing adds to two counters and a growth: every add is in
/// exactly one take or in the final snapshot, never lost or doubled.
#[test]
fn set_take_all_racing_adds() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(2, 2));
        let adder = {
            let s = s.clone();
            thread::spawn(move || {
                s.add(0, 1);
                s.add(1, 2);
            })
        };
        let taker = {
            let s = s.clone();
            thread::spawn(move || {
                s.grow_once();
                s.take_all()
            })
        };
        let mine = s.take_all();
        let theirs = taker.join().unwrap();
        adder.join().unwrap();
        let rest = s.snapshot();
        for i in 0..2 {
            assert_eq!(mine[i] + theirs[i] + rest[i], [1, 2][i], "counter {i}");
        }
    });
}

/// An owner storing plainly into two counters of its row (a histogram's
/// pair add does the same) racing `take(i)` and `take_all` on another
/// thread and a read: every add in exactly one take or the final read,
/// no read or take ever a wrapped huge value.
#[test]
fn set_owned_stores_racing_takes() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(2, 2));
        s.grow_once();
        let owner = {
            let s = s.clone();
            thread::spawn(move || {
                s.add(0, 1);
                s.add(1, 2);
                s.add(0, 4);
            })
        };
        let taker = {
            let s = s.clone();
            thread::spawn(move || s.take_all())
        };
        let one = s.take(0).unwrap();
        let seen = s.get(0).unwrap();
        assert!(
            one <= 5 && seen <= 5,
            "a wrapped read: take {one}, get {seen}"
        );
        let all = taker.join().unwrap();
        owner.join().unwrap();
        assert!(all[0] <= 5 && all[1] <= 2, "a wrapped take: {all:?}");
        let rest = s.snapshot();
        assert_eq!(one + all[0] + rest[0], 5);
        assert_eq!(all[1] + rest[1], 2);
    });
}

/// A take alone never grows a set: the shared take epoch gives no verdict.
#[test]
fn set_take_never_grows() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(2, 4));
        let taker = {
            let s = s.clone();
            thread::spawn(move || s.take_all())
        };
        s.add(1, 1);
        s.add(1, 2);
        let taken = taker.join().unwrap();
        assert_eq!(taken[1] + s.get(1).unwrap(), 3);
        assert_eq!(s.shards(), 0, "a take alone grew the set");
    });
}

/// Two threads adding to *different* counters of the base row: whichever
/// samples second finds the other's mark, so the set grows in every
/// interleaving (one strike grows under loom), and both counts survive the
/// switch to rows.
#[test]
fn set_false_sharing_grows_without_loss() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(2, 2));
        let other = {
            let s = s.clone();
            thread::spawn(move || s.add(1, 10))
        };
        s.add(0, 1);
        other.join().unwrap();
        assert_eq!(s.shards(), 2, "false sharing did not grow the set");
        assert_eq!(s.snapshot(), vec![1, 10]);
    });
}

/// One thread alone never finds another's mark: its adds to many counters
/// never grow the set.
#[test]
fn set_one_thread_never_grows() {
    super::model(|| {
        let s = CounterSet::with_max_shards(3, 2);
        for i in 0..3 {
            s.add(i, 1);
            s.add(i, 2);
        }
        assert_eq!(s.shards(), 0);
        assert_eq!(s.snapshot(), vec![3, 3, 3]);
    });
}

/// Two raises racing on the base: the larger wins, whichever order, and a
/// concurrent reader never sees a value nobody recorded or a decrease.
#[test]
fn max_racing_max() {
    super::model(|| {
        let m = Arc::new(MaxCounter::new());
        let other = {
            let m = m.clone();
            thread::spawn(move || {
                m.record(3);
                m.record(9);
            })
        };
        m.record(5);
        let first = m.get();
        let second = m.get();
        assert!([5, 9].contains(&first), "read {first}");
        assert!(second >= first, "max went back: {first} -> {second}");
        other.join().unwrap();
        assert_eq!(m.get(), 9);
    });
}

/// Raises racing a growth and a take: every record is reflected in the
/// take or stays, and the final value is exact.
#[test]
fn max_take_racing_raises_and_growth() {
    super::model(|| {
        let m = Arc::new(MaxCounter::new());
        let other = {
            let m = m.clone();
            thread::spawn(move || {
                m.grow_once();
                m.record(7);
            })
        };
        m.record(4);
        let taken = m.take();
        other.join().unwrap();
        let rest = m.get();
        // 4 happened-before the take: it got at least 4. 7 is in the take
        // or stays.
        assert!(taken >= 4, "take lost 4: {taken}");
        assert!(taken == 7 || rest == 7, "7 lost: took {taken}, left {rest}");
        assert!(rest == 0 || rest == 7, "left {rest}");
    });
}

/// The minimum through the same code, complemented.
#[test]
fn min_racing_min() {
    super::model(|| {
        let m = Arc::new(MinCounter::new());
        let other = {
            let m = m.clone();
            thread::spawn(move || m.record(2))
        };
        m.record(6);
        other.join().unwrap();
        assert_eq!(m.get(), 2);
    });
}

/// Two threads' first adds of the same key race its interning: one index,
/// one counter, no count lost.
#[test]
fn map_interning_racing_first_adds() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        let other = {
            let m = m.clone();
            thread::spawn(move || m.add(&7, 1))
        };
        m.add(&7, 2);
        other.join().unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m.snapshot(), vec![(7, 3)]);
    });
}

/// Two new keys race to be interned, and so to create the chunk both
/// their indices fall in, while a snapshot runs: one chunk is made, both
/// keys count exactly, and the snapshot shows each key it lists with 0 or
/// its whole add.
#[test]
fn map_new_keys_race_for_one_chunk() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        let (a, b) = (3, 4);
        let other = {
            let m = m.clone();
            thread::spawn(move || m.add(&b, 5))
        };
        m.add(&a, 1);
        let seen = m.snapshot();
        assert!(seen.contains(&(a, 1)), "{seen:?}");
        // `b` may be interned with its add still to come.
        assert!(
            seen.len() == 1 || seen.contains(&(b, 0)) || seen.contains(&(b, 5)),
            "{seen:?}"
        );
        other.join().unwrap();
        assert_eq!(m.allocated_chunks(), 1);
        let mut all = m.snapshot();
        all.sort_unstable();
        let mut want = vec![(a, 1), (b, 5)];
        want.sort_unstable();
        assert_eq!(all, want);
    });
}

/// The same race on a map with room for that one key: whichever thread
/// interns it, the other's add reaches the key's counter, never the
/// overflow (it misses the key, then finds the map full: it must look
/// again).
#[test]
fn map_racing_first_adds_of_the_last_key() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::with_max_keys(1));
        let other = {
            let m = m.clone();
            thread::spawn(move || m.add(&7, 1))
        };
        m.add(&7, 2);
        other.join().unwrap();
        assert_eq!((m.get(&7), m.overflow()), (Some(3), 0));
    });
}

/// Adds through a handle (chunk 0) race the allocation of chunk 1 by a new
/// key's interning, and a snapshot: the snapshot never shows more than was
/// added, and the end state is exact.
#[test]
fn map_add_racing_chunk_allocation() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&0, 1);
        m.add(&1, 0); // chunk 0 full (2 counters under loom)
        let h = m.handle(&0);
        let other = {
            let m = m.clone();
            thread::spawn(move || m.add(&2, 5)) // allocates chunk 1
        };
        h.add(2);
        let seen = m.snapshot();
        assert!(seen.len() == 2 || seen.len() == 3, "{seen:?}");
        assert!(seen[0].1 == 1 || seen[0].1 == 3, "{seen:?}");
        other.join().unwrap();
        assert_eq!(m.snapshot(), vec![(0, 3), (1, 0), (2, 5)]);
        assert_eq!(m.allocated_chunks(), 2);
    });
}

/// `take_all` racing adds by key: each add is in the take or stays.
#[test]
fn map_take_all_racing_adds() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        let h = m.handle(&1);
        let other = {
            let m = m.clone();
            thread::spawn(move || {
                m.add(&1, 1);
                m.add(&1, 2);
            })
        };
        let taken = m.take_all();
        other.join().unwrap();
        let got: u64 = taken.iter().map(|&(_, v)| v).sum::<u64>() + h.sum();
        assert_eq!(got, 3);
    });
}

/// Keys beyond the bound go to the overflow counter, racing or not.
#[test]
fn map_overflow_racing_interning() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::with_max_keys(1));
        let other = {
            let m = m.clone();
            thread::spawn(move || m.add(&1, 10))
        };
        m.add(&2, 20);
        other.join().unwrap();
        assert_eq!(m.len(), 1);
        let kept = m.snapshot()[0];
        assert!(kept == (1, 10) || kept == (2, 20), "{kept:?}");
        assert_eq!(m.overflow() + kept.1, 30);
    });
}

/// Two new keys both need segment 1, which does not exist yet (under
/// loom: segment 0 is chunk 0, indices 0 and 1; segment 1 holds chunks 1
/// and 2): whichever is interned first installs it and its chunk.
/// Meanwhile lookups run: a key of segment 0 by key, the keys being
/// interned, and the lock-free chunk count. Every count lands exactly.
#[test]
fn map_new_keys_race_for_a_new_segment() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::unbounded());
        let (a, b) = (2, 3);
        m.add(&0, 1);
        m.add(&1, 2); // segment 0 full
        assert_eq!(m.allocated_chunks(), 1);
        let adders: Vec<_> = [(a, 5), (b, 7)]
            .into_iter()
            .map(|(k, v)| {
                let m = m.clone();
                thread::spawn(move || m.add(&k, v))
            })
            .collect();
        let chunks = m.allocated_chunks();
        assert!(chunks == 1 || chunks == 2, "{chunks} chunks");
        assert_eq!(m.get(&0), Some(1));
        let seen = m.get(&a);
        assert!(matches!(seen, None | Some(0) | Some(5)), "{seen:?}");
        for t in adders {
            t.join().unwrap();
        }
        assert_eq!(m.allocated_chunks(), 2);
        let mut all = m.snapshot();
        all.sort_unstable();
        let mut want = vec![(0, 1), (1, 2), (a, 5), (b, 7)];
        want.sort_unstable();
        assert_eq!(all, want);
    });
}

/// Two first adds to a `lazy` set (`LabelledCounter::new`,
/// `Histogram::new`) racing to make its base row, and a take racing both:
/// one row is published, the loser's is freed, and every count is in the
/// take or in the set afterwards. Fails if `BaseRow::make` stores its row
/// instead of publishing it from null (the first row's count is lost).
#[test]
fn lazy_set_first_adds_race_to_make_the_base_row() {
    super::model(|| {
        let s = Arc::new(CounterSet::lazy(2));
        let other = {
            let s = s.clone();
            thread::spawn(move || s.add(1, 10))
        };
        let taker = {
            let s = s.clone();
            thread::spawn(move || s.take_all())
        };
        s.add(1, 1);
        other.join().unwrap();
        let taken = taker.join().unwrap();
        assert_eq!(taken[1] + s.snapshot()[1], 11);
        assert_eq!(taken[0] + s.snapshot()[0], 0);
    });
}
