//! `FleetKeys`: a key set's cache.
//!
//! # Protocol
//!
//! Each key set (`FleetKeys`) owns its cache: `values` (one `AtomicI64`
//! per key), `total`, `stamp` (when the values were read, in nanoseconds
//! since the reader's `base`, + 1; 0 = never) and `due` (when the next
//! refresh is due). A read is a clock read, a load of `due` and loads of
//! the values: no lock, no allocation. The first reader past `due` tries
//! the `refresh` mutex; the winner fetches (one round trip), stores the
//! values, `stamp`, then `due` (Release); the others return the old values
//! at once. Only a set never read yet makes its readers wait (for the
//! first fetch). A failed fetch moves `due` one TTL on, so a Redis outage
//! costs one timeout per TTL, not one per read.
//!
//! Orderings: readers load `due` with Acquire, pairing with the refresher's
//! Release store, so values loaded after it are from that refresh or a
//! later one; the values themselves are Relaxed (a key's value may be from
//! a refresh later than another key's while a refresh is storing; the
//! total is always one refresh's sum). `round_trips` is a Relaxed tally.

use super::reading::{FleetReadError, Reading};
use super::server::Conn;
use super::server::Server;
use crate::primitive::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use crate::primitive::sync::{lock, try_lock, Arc, Mutex};
use std::fmt;
use std::time::Duration;

/// The refresher's state, under the `refresh` mutex.
pub(super) struct Refresh {
    pub(super) conn: Option<Conn>,
    last_error: Option<String>,
}

/// A cached key set of a [`FleetReader`](super::reader::FleetReader); see
/// there.
/// Share it (by reference or in an `Arc`) among the threads that read it.
///
/// ```no_run
/// use shardcount::fleet::FleetReader;
/// use std::time::Duration;
/// let reader = FleetReader::new("redis://127.0.0.1:6379", "fleet:", Duration::from_secs(1)).unwrap();
/// let set = reader.keys(["a", "b"]);
/// let (a, b) = (set.get(0).unwrap().unwrap(), set.get(1).unwrap().unwrap());
/// let sum = set.total().unwrap();
/// println!("{} + {} = {}", a.value, b.value, sum.value); // within one refresh
/// ```
pub struct FleetKeys {
    pub(super) server: Arc<Server>,
    /// Fixed keys (without the prefix), or `None` for every key.
    pub(super) fixed: Option<Vec<String>>,
    values: Box<[AtomicI64]>,
    total: AtomicI64,
    stamp: AtomicU64,
    due: AtomicU64,
    refresh: Mutex<Refresh>,
    /// Every key's value for `all()` sets, replaced on each refresh.
    listing: Mutex<Vec<(String, i64)>>,
}

impl FleetKeys {
    pub(super) fn new(server: Arc<Server>, fixed: Option<Vec<String>>) -> FleetKeys {
        let n = fixed.as_ref().map_or(0, Vec::len);
        FleetKeys {
            server,
            fixed,
            values: (0..n).map(|_| AtomicI64::new(0)).collect(),
            total: AtomicI64::new(0),
            stamp: AtomicU64::new(0),
            due: AtomicU64::new(0),
            refresh: Mutex::new(Refresh {
                conn: None,
                last_error: None,
            }),
            listing: Mutex::new(Vec::new()),
        }
    }

    /// The set's keys (without the prefix); for an
    /// [`all`](super::reader::FleetReader::all) set, those of the last refresh.
    ///
    /// ```
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:1", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(reader.keys(["x", "y"]).keys(), ["x", "y"]);
    /// ```
    #[must_use]
    pub fn keys(&self) -> Vec<String> {
        match &self.fixed {
            Some(k) => k.clone(),
            None => lock(&self.listing).iter().map(|(k, _)| k.clone()).collect(),
        }
    }

    /// The sum of the set's keys (wrapping), through the cache.
    ///
    /// # Errors
    ///
    /// [`FleetReadError`] only if the set was never read successfully.
    ///
    /// ```no_run
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:6379", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// let sold = reader.all().total().unwrap().value;
    /// # drop(sold);
    /// ```
    #[inline]
    pub fn total(&self) -> Result<Reading, FleetReadError> {
        // Relaxed: ordered after `due`'s Acquire load in `age`.
        self.age().map(|age| Reading {
            value: self.total.load(Ordering::Relaxed),
            age,
        })
    }

    /// The value of the set's `i`-th key (in [`keys`](Self::keys) order),
    /// through the cache. `None` past the end (and always for an `all`
    /// set: use [`values`](Self::values)).
    ///
    /// # Errors
    ///
    /// [`FleetReadError`] only if the set was never read successfully.
    ///
    /// ```no_run
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:6379", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// let hits = reader.key("hits");
    /// let n = hits.get(0).unwrap().map_or(0, |r| r.value);
    /// # drop(n);
    /// ```
    #[inline]
    pub fn get(&self, i: usize) -> Result<Option<Reading>, FleetReadError> {
        let age = self.age()?;
        // Relaxed: ordered after `due`'s Acquire load in `age`.
        Ok(self.values.get(i).map(|v| Reading {
            value: v.load(Ordering::Relaxed),
            age,
        }))
    }

    /// Every key with its value, through the cache (allocates; takes a
    /// short lock), and their age.
    ///
    /// # Errors
    ///
    /// [`FleetReadError`] only if the set was never read successfully.
    ///
    /// ```no_run
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:6379", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// let (values, age) = reader.all().values().unwrap();
    /// for (key, v) in values {
    ///     println!("{key} {v} ({age:?} old)");
    /// }
    /// ```
    pub fn values(&self) -> Result<(Vec<(String, i64)>, Duration), FleetReadError> {
        let age = self.age()?;
        let values = match &self.fixed {
            // Relaxed: ordered after `due`'s Acquire load in `age`.
            Some(keys) => keys
                .iter()
                .zip(self.values.iter())
                .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
                .collect(),
            None => lock(&self.listing).clone(),
        };
        Ok((values, age))
    }

    fn now(&self) -> u64 {
        self.server.base.elapsed().as_nanos() as u64
    }

    /// The cache check: the age of the cached values, refreshing first when
    /// they are due (see the module notes).
    #[inline]
    fn age(&self) -> Result<Duration, FleetReadError> {
        let now = self.now();
        // Acquire: pairs with the refresher's Release store, so the values
        // loaded after this are at least that refresh's.
        if now < self.due.load(Ordering::Acquire) {
            // Relaxed: written before `due`, ordered by the load above.
            let stamp = self.stamp.load(Ordering::Relaxed);
            // 0: never read (the first fetch failed): the slow path says why.
            if stamp != 0 {
                return Ok(Duration::from_nanos(now.saturating_sub(stamp - 1)));
            }
        }
        self.refresh_due()
    }

    #[cold]
    #[inline(never)]
    fn refresh_due(&self) -> Result<Duration, FleetReadError> {
        // Poison is ignored (`try_lock`): `Refresh` holds only a connection
        // and the last error, consistent at any point.
        let mut guard = match try_lock(&self.refresh) {
            Some(g) => Some(g),
            // Acquire: see `age`.
            None if self.stamp.load(Ordering::Acquire) != 0 => None,
            // Never read: wait for the refresh in progress.
            None => Some(lock(&self.refresh)),
        };
        if let Some(r) = guard.as_mut() {
            let now = self.now();
            // Acquire: see `age`. Someone may have refreshed meanwhile.
            if now >= self.due.load(Ordering::Acquire) {
                self.fetch(r);
            }
        }
        // Acquire: see `age`.
        let stamp = self.stamp.load(Ordering::Acquire);
        if stamp == 0 {
            let cause = guard
                .and_then(|r| r.last_error.clone())
                .unwrap_or_else(|| "no reply yet".into());
            return Err(FleetReadError(cause));
        }
        Ok(Duration::from_nanos(self.now().saturating_sub(stamp - 1)))
    }

    /// One round trip; stores the values, or records the error. Either way
    /// the next refresh is one TTL after the round trip ends (not after it
    /// starts: a fetch as slow as the TTL would be due again at once).
    fn fetch(&self, r: &mut Refresh) {
        // Saturating: `as` would wrap a TTL past 584 years to a short one.
        let ttl = u64::try_from(self.server.ttl.as_nanos()).unwrap_or(u64::MAX);
        let reused = r.conn.is_some();
        let got = match self.query(r) {
            // A kept connection the server closed meanwhile (its idle
            // timeout, a restart): once more, on a fresh one.
            Err(e) if reused && e.closed => {
                r.conn = None;
                self.query(r)
            }
            got => got,
        };
        let now = self.now();
        match got {
            Ok(values) => {
                let mut total = 0i64;
                // Relaxed: published by the Release store of `due` below.
                if self.fixed.is_some() {
                    for (slot, (_, v)) in self.values.iter().zip(&values) {
                        slot.store(*v, Ordering::Relaxed);
                        total = total.wrapping_add(*v);
                    }
                } else {
                    total = values.iter().fold(0i64, |t, (_, v)| t.wrapping_add(*v));
                    *lock(&self.listing) = values;
                }
                self.total.store(total, Ordering::Relaxed);
                self.stamp.store(now + 1, Ordering::Relaxed);
                r.last_error = None;
            }
            Err(e) => {
                if !e.answered {
                    r.conn = None;
                }
                r.last_error = Some(e.message);
            }
        }
        // Release: publishes the values and stamp stored above.
        self.due
            .store(now.saturating_add(ttl).max(1), Ordering::Release);
    }
}

impl fmt::Debug for FleetKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetKeys")
            .field("keys", &self.fixed)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::fleet::read::reader::FleetReader;
    use std::time::Duration;

    #[test]
    fn a_set_never_read_reports_the_cause() {
        // Port 1 refuses connections: the first read fails with the cause.
        let r = FleetReader::new("redis://127.0.0.1:1", "x:", Duration::from_secs(60))
            .unwrap()
            .with_timeout(Duration::from_millis(200));
        let k = r.key("k");
        let e = k.total().unwrap_err();
        assert!(!e.0.is_empty());
        // The next read within the TTL does not try again.
        assert_eq!(r.round_trips(), 1);
        assert!(k.total().is_err());
        assert_eq!(r.round_trips(), 1);
    }
}
