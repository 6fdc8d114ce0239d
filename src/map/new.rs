//! Making a map: the bound on its keys, the name of their label.

use super::counter_map::CounterMap;
use super::hasher::KeyedState;
use super::index::Index;
use crate::primitive::sync::atomic::{AtomicPtr, AtomicUsize};
use crate::primitive::sync::Mutex;
use crate::set::CounterSet;
use std::hash::Hash;
use std::ptr;
use std::time::Instant;

/// The bound [`CounterMap::new`] sets.
#[cfg(not(shardcount_loom))]
const DEFAULT_MAX_KEYS: usize = 1 << 16;
#[cfg(shardcount_loom)]
const DEFAULT_MAX_KEYS: usize = 4;

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// An empty map that gives up to 65,536 keys their own counter.
    ///
    /// ```
    /// let m: shardcount::CounterMap<String> = shardcount::CounterMap::new();
    /// assert_eq!(m.max_keys(), 65_536);
    /// assert!(m.is_empty());
    /// ```
    #[must_use]
    pub fn new() -> Self {
        CounterMap::with_max_keys(DEFAULT_MAX_KEYS)
    }

    /// An empty map that gives up to `max_keys` keys their own counter and
    /// counts every add for a further key in [`overflow`](Self::overflow).
    /// Any bound, up to `usize::MAX`: memory follows the keys interned,
    /// not the bound.
    ///
    /// ```
    /// let m = shardcount::CounterMap::with_max_keys(1);
    /// m.add(&"a", 1);
    /// m.add(&"b", 2); // beyond the bound
    /// m.add(&"c", 3);
    /// assert_eq!(m.get(&"a"), Some(1));
    /// assert_eq!(m.get(&"b"), None);
    /// assert_eq!(m.overflow(), 5);
    /// ```
    #[must_use]
    pub fn with_max_keys(max_keys: usize) -> Self {
        CounterMap {
            index: Index::new(),
            hasher: KeyedState::new(),
            next: AtomicUsize::new(0),
            segments: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            max_keys,
            overflow: CounterSet::new(1),
            born: Instant::now(),
            label: ["key"],
            departed: Mutex::new(Vec::new()),
        }
    }

    /// Names the keys' label `name` in every integration that exports the
    /// map (prometheus-client, tikv `prometheus`, OpenTelemetry, `metrics`'
    /// `publish`, serde), instead of `key`.
    ///
    /// # Panics
    ///
    /// If `name` is not a label name in every format those write:
    /// `[a-zA-Z_][a-zA-Z0-9_]*`, as `#[derive(Label)]` requires.
    ///
    /// ```
    /// use shardcount::contract::CountFamily;
    /// use shardcount::CounterMap;
    ///
    /// let visits: CounterMap<u64> = CounterMap::new().with_label_name("user_id");
    /// visits.add(&42, 3);
    /// assert_eq!(visits.label_names(), ["user_id"]); // user_id="42" once exported
    ///
    /// let spaced = std::panic::catch_unwind(|| {
    ///     CounterMap::<u64>::new().with_label_name("user id")
    /// });
    /// assert!(spaced.is_err());
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_label_name(mut self, name: &'static str) -> Self {
        crate::contract::assert_label_name(name, "CounterMap::with_label_name");
        self.label = [name];
        self
    }

    /// An empty map with no bound on keys: memory grows with every
    /// distinct key. Every key gets its own counter, so
    /// [`overflow`](Self::overflow) stays zero; `max_keys()` is
    /// `usize::MAX`. For keys from outside (paths, user agents), prefer a
    /// bound: it caps memory whatever arrives.
    ///
    /// ```
    /// let m = shardcount::CounterMap::unbounded();
    /// assert_eq!(m.max_keys(), usize::MAX);
    /// for k in 0..100_000u32 {
    ///     m.inc(&k);
    /// }
    /// assert_eq!(m.len(), 100_000);
    /// assert_eq!(m.overflow(), 0);
    /// ```
    #[must_use]
    pub fn unbounded() -> Self {
        CounterMap::with_max_keys(usize::MAX)
    }
}
