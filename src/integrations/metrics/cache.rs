//! Each thread's cache from counter key to a handle of its own, so that
//! `counter!` on a known key takes no lock and clones only a reference
//! count that no other thread touches.
//!
//! Protocol (maintainers' notes): a cache belongs to one recorder,
//! identified by a `Weak` reference to its key table (the allocation
//! cannot be reused while the `Weak` lives); caches of dropped recorders
//! are cleared at the thread's next miss. Dropping a cache (thread exit, or
//! its recorder is gone) retires its handles (`entry.rs`); a sweep retires
//! and lets go of the handles of evicted entries (`evict.rs`).

use super::entry::Local;
use super::key::{same_key, KeyMap};
use super::table::KeyTable;
use crate::primitive::const_thread_local;
use crate::primitive::sync::{Arc, Weak};
use ::metrics::Key;
use std::cell::RefCell;

/// A thread's own handle to a counter key.
type Handle = Local<super::table::Registered<::metrics::Counter>>;

/// One thread's handles for one recorder.
///
/// A hit is usually decided in `front`, a small direct-mapped table indexed
/// by the hash the key carries (computed once, by `Key`'s constructor) and
/// confirmed by [`same_key`], which compares the key's strings by address
/// first: a `counter!` call site builds its key from the same `'static`
/// strings every time, so a hit compares no bytes. Every handle is also in
/// `handles`, where keys that lost their `front` slot to another are found.
struct Cache {
    owner: Weak<KeyTable>,
    /// The owner's count of evicting passes at this cache's last sweep (or
    /// creation).
    seen: u64,
    front: Box<[Option<Cached>; FRONT]>,
    handles: KeyMap<Arc<Handle>>,
}

/// A key and this thread's handle for it.
type Cached = (Key, Arc<Handle>);

/// Slots in a [`Cache`]'s `front` (a power of two).
const FRONT: usize = 32;

impl Cache {
    fn new(owner: Weak<KeyTable>, seen: u64) -> Self {
        Cache {
            owner,
            seen,
            front: Box::new([const { None }; FRONT]),
            handles: KeyMap::default(),
        }
    }

    /// Retires and lets go of the handles of evicted keys. The entry's next
    /// fold takes each one's word a last time and drops it from its list.
    fn sweep(&mut self) {
        self.handles.retain(|_, local| {
            if local.evicted() {
                // By the owner, after its last increment to the word.
                local.retire();
                return false;
            }
            true
        });
        super::evict::shrink(&mut self.handles);
        for slot in self.front.iter_mut() {
            if slot.as_ref().is_some_and(|(_, local)| local.evicted()) {
                *slot = None;
            }
        }
    }

    #[inline]
    fn slot(key: &Key) -> usize {
        // The high bits: the map below indexes with the low ones.
        (key.get_hash() >> (64 - FRONT.trailing_zeros())) as usize
    }

    #[inline]
    fn get(&self, key: &Key) -> Option<&Arc<Handle>> {
        match &self.front[Self::slot(key)] {
            Some((k, local)) if same_key(k, key) => Some(local),
            _ => self.handles.get(key),
        }
    }

    /// Caches `local` for `key`; false if the key has a handle already
    /// (which stays).
    fn insert(&mut self, key: &Key, local: &Arc<Handle>) -> bool {
        use std::collections::hash_map::Entry as Slot;
        match self.handles.entry(key.clone()) {
            Slot::Occupied(_) => return false,
            Slot::Vacant(v) => v.insert(Arc::clone(local)),
        };
        // The first key to a slot keeps it: no key evicts another on
        // every call.
        let front = &mut self.front[Self::slot(key)];
        let refs = if front.is_none() {
            *front = Some((key.clone(), Arc::clone(local)));
            2
        } else {
            1
        };
        local.set_cached(refs);
        true
    }
}

impl Drop for Cache {
    /// The thread is exiting or the recorder is gone: the thread's handles
    /// stop counting in their own words.
    fn drop(&mut self) {
        for local in self.handles.values() {
            local.retire();
        }
    }
}

const_thread_local! {
    /// This thread's caches, one per live recorder it has used.
    static CACHES: RefCell<Vec<Cache>> = RefCell::new(Vec::new());
}

/// The `counter!` hit: this thread's handle for `key` in `shared`'s cache,
/// unless a pass evicted keys since the cache's last sweep. No lock.
#[inline]
pub(super) fn hit(shared: &KeyTable, key: &Key) -> Option<Arc<Handle>> {
    let me = std::ptr::from_ref(shared);
    CACHES
        .try_with(|caches| {
            let caches = caches.try_borrow().ok()?;
            let cache = caches.iter().find(|c| c.owner.as_ptr() == me)?;
            if cache.seen != shared.evicted.passes_hint() {
                return None;
            }
            cache.get(key).cloned()
        })
        .ok()
        .flatten()
}

/// This thread's handle for `key`, after sweeping the handles of evicted
/// keys out of its cache if it has not seen `passes` (read with
/// `Evicted::passes`) yet.
pub(super) fn swept_hit(shared: &Arc<KeyTable>, key: &Key, passes: u64) -> Option<Arc<Handle>> {
    let me = Arc::as_ptr(shared);
    CACHES
        .try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            let cache = caches.iter_mut().find(|c| c.owner.as_ptr() == me)?;
            if cache.seen != passes {
                cache.sweep();
                cache.seen = passes;
            }
            cache.get(key).cloned()
        })
        .ok()
        .flatten()
}

/// Caches `local` for `key` in this thread's cache for `shared` (a new
/// cache has seen `passes`); false when it is not cached: the thread-local
/// is gone (thread exit) or already borrowed (a registration from inside
/// one), or the key has a handle already.
pub(super) fn keep(shared: &Arc<KeyTable>, key: &Key, local: &Arc<Handle>, passes: u64) -> bool {
    let me = Arc::as_ptr(shared);
    CACHES
        .try_with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else {
                return false;
            };
            caches.retain(|c| c.owner.strong_count() > 0);
            let i = match caches.iter().position(|c| c.owner.as_ptr() == me) {
                Some(i) => i,
                None => {
                    caches.push(Cache::new(Arc::downgrade(shared), passes));
                    caches.len() - 1
                }
            };
            caches[i].insert(key, local)
        })
        .unwrap_or(false)
}
