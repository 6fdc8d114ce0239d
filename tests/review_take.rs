//! Takes whose caller sees a panic: nothing taken may vanish with it.
#![cfg(not(shardcount_loom))]

use shardcount::CounterMap;
use std::sync::atomic::{AtomicBool, Ordering};

static CLONE_PANICS: AtomicBool = AtomicBool::new(false);

/// A key whose `clone` panics while `CLONE_PANICS` is set.
#[derive(PartialEq, Eq, Hash, Debug)]
struct Key(u32);

impl Clone for Key {
    fn clone(&self) -> Self {
        // Relaxed: one thread sets and reads it.
        assert!(!CLONE_PANICS.load(Ordering::Relaxed), "clone of {self:?}");
        Key(self.0)
    }
}

/// `take_all` clones the keys it returns before it swaps any counter: a
/// key's `clone` that panics must not drop the taken counts on the floor.
#[test]
fn a_key_clone_panicking_in_take_all_loses_nothing() {
    let m: CounterMap<Key> = CounterMap::new();
    m.add(&Key(1), 5);
    CLONE_PANICS.store(true, Ordering::Relaxed);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.take_all()));
    CLONE_PANICS.store(false, Ordering::Relaxed);
    assert!(r.is_err());
    assert_eq!(m.get(&Key(1)), Some(5), "the 5 taken went nowhere");
}
