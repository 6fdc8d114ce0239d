//! The lock-free key index of `CounterMap` (`src/map/index.rs`): lookups
//! that take no lock racing inserts, a second insert of one key, and a
//! growth of the table. Under loom the index's first table has 2 slots, so
//! the second key grows it; entries and tables are read through loom's
//! cell, so a lookup that reads one without a happens-before edge from its
//! making (a missing `Release` or `Acquire`) fails the model.

use super::thread;
use loom::sync::Arc;

/// A lock-free lookup racing the insert of the key it looks up: it sees
/// no counter or the whole entry (key, place, chunk), never a half-made
/// one; afterwards the key is found with its add.
#[test]
fn index_insert_racing_lookup() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        // The lookup on the spawned thread: loom's first schedule runs the
        // main thread's insert first, and then the lookup sees the entry
        // with no synchronisation but the slot's own.
        let lookup = {
            let m = m.clone();
            thread::spawn(move || m.get(&1))
        };
        m.add(&1, 1);
        let seen = lookup.join().unwrap();
        assert!(matches!(seen, None | Some(0) | Some(1)), "{seen:?}");
        assert_eq!(m.get(&1), Some(1));
    });
}

/// Two threads' first adds of one key: both miss without the lock, both
/// reach the insert; the second must find the first's entry under the
/// lock. One entry, one index, no count lost.
#[test]
fn index_two_threads_insert_the_same_key() {
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
        assert_eq!(m.get(&7), Some(3));
    });
}

/// A new key grows the table (2 slots to 4) while another thread looks up
/// and adds to a key interned before: the lookup finds it in whichever
/// table it loads (the old one is kept), and a lookup of the new key sees
/// nothing or its whole entry in the new table. Every count lands.
#[test]
fn index_growth_racing_lookups() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&0, 1);
        // Lookups on the spawned thread (see `index_insert_racing_lookup`).
        let lookups = {
            let m = m.clone();
            thread::spawn(move || {
                m.add(&0, 1); // lock-free: key 0 is interned
                m.get(&1)
            })
        };
        m.add(&1, 2); // grows the table
        let seen = lookups.join().unwrap();
        assert!(matches!(seen, None | Some(0) | Some(2)), "{seen:?}");
        assert_eq!((m.get(&0), m.get(&1)), (Some(2), Some(2)));
        assert_eq!(m.snapshot(), vec![(0, 2), (1, 2)]);
    });
}

/// A removal racing an add by key: the add lands before the unlink (and
/// is in the total returned) or finds no key and makes a fresh counter;
/// never lost, never in both.
#[test]
fn remove_racing_an_add_by_key() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&1, 2);
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.add(&1, 1))
        };
        let removed = m.remove(&1);
        adder.join().unwrap();
        assert!(matches!(removed, Some(2) | Some(3)), "{removed:?}");
        assert_eq!(removed.unwrap() + m.get(&1).unwrap_or(0), 3);
    });
}

/// A removal racing the making of a handle and an add through it: the
/// handle holds its key (the removal then only takes the total) or makes
/// it afresh after the removal; every add is counted once.
#[test]
fn remove_racing_a_handle() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&1, 2);
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.handle(&1).add(1))
        };
        let removed = m.remove(&1).unwrap();
        adder.join().unwrap();
        assert_eq!(removed + m.get(&1).unwrap(), 3);
    });
}

/// A removal that leaves two chunks half full moves the higher chunk's key
/// into the lower one and frees the emptied chunk, while another thread
/// adds to the moving key: its add is on the old counter (moved with it)
/// or on the new one.
#[test]
fn compaction_racing_an_add_to_the_moving_key() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        for k in 0..4 {
            m.add(&k, 1); // slots 0..4: chunks 0 and 1
        }
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.add(&2, 1))
        };
        m.retain(|&k, _| k == 1 || k == 2); // key 2 moves to slot 0
        adder.join().unwrap();
        assert_eq!((m.get(&1), m.get(&2)), (Some(1), Some(2)));
        assert_eq!(m.allocated_chunks(), 1);
        assert_eq!(m.len(), 2);
    });
}

/// Two removals leave the index empty: the second shrinks the table (4
/// slots to 2: a rebuild, a grace period, the old table freed) and frees
/// the only chunk, while another thread adds to a removed key (found in the
/// old table, or interned afresh into a reallocated chunk).
#[test]
fn shrink_and_chunk_free_racing_an_add() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&0, 1);
        m.add(&1, 1); // table grows to 4 slots; chunk 0 = slots 0, 1
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.add(&0, 1))
        };
        let r0 = m.remove(&0).unwrap();
        let r1 = m.remove(&1).unwrap();
        adder.join().unwrap();
        assert_eq!(r1, 1);
        assert_eq!(r0 + m.get(&0).unwrap_or(0), 2);
        assert_eq!(m.len(), usize::from(m.get(&0).is_some()));
    });
}

/// A removed key's slot is reused by a new key at once, while another
/// thread adds to the removed key: the new key never sees that add.
#[test]
fn slot_reuse_racing_an_add_to_the_removed_key() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&1, 2);
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.add(&1, 1))
        };
        let r = m.remove(&1).unwrap();
        m.add(&2, 5);
        adder.join().unwrap();
        assert_eq!(m.get(&2), Some(5));
        assert_eq!(r + m.get(&1).unwrap_or(0), 3);
    });
}

/// A handle made while a compaction moves its key: the key is held either
/// at its old place (not moved) or at its new one; every add lands once.
#[test]
fn handle_racing_compaction() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        for k in 0..4 {
            m.add(&k, 1);
        }
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.handle(&2).add(1))
        };
        m.retain(|&k, _| k == 1 || k == 2);
        adder.join().unwrap();
        assert_eq!((m.get(&1), m.get(&2)), (Some(1), Some(2)));
        m.handle(&2).add(1);
        assert_eq!(m.snapshot(), vec![(1, 1), (2, 3)]);
    });
}

/// Two grace periods at once (removals on two maps) while a third thread
/// adds to a key being removed: `WAITS` keeps each wait covering both
/// phases.
#[test]
fn two_concurrent_grace_periods_and_an_add() {
    super::model(|| {
        let m = Arc::new(crate::CounterMap::<u8>::new());
        let m2 = Arc::new(crate::CounterMap::<u8>::new());
        m.add(&1, 2);
        m2.add(&1, 1);
        let other = {
            let m2 = m2.clone();
            thread::spawn(move || m2.remove(&1))
        };
        let adder = {
            let m = m.clone();
            thread::spawn(move || m.add(&1, 1))
        };
        let r = m.remove(&1).unwrap();
        adder.join().unwrap();
        assert_eq!(other.join().unwrap(), Some(1));
        assert_eq!(r + m.get(&1).unwrap_or(0), 3);
    });
}
