//! The lock-free key index of `CounterMap` (`src/map/index.rs`): lookups
//! that take no lock racing inserts, a second insert of one key, and a
//! growth of the table. Under loom the index's first table has 2 slots, so
//! the second key grows it; entries and tables are read through loom's
//! cell, so a lookup that reads one without a happens-before edge from its
//! making (a missing `Release` or `Acquire`) fails the model.

use loom::sync::Arc;
use loom::thread;

/// A lock-free lookup racing the insert of the key it looks up: it sees
/// no counter or the whole entry (key, place, chunk), never a half-made
/// one; afterwards the key is found with its add.
#[test]
fn index_insert_racing_lookup() {
    loom::model(|| {
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
    loom::model(|| {
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
    loom::model(|| {
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
