//! `FleetReader` (feature `redis`): the fleet's totals, read from the keys
//! the Redis sink writes, through a TTL cache.
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

use crate::primitive::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use crate::primitive::sync::{lock, try_lock, Arc, Mutex};
use redis::{Client, Connection};
use std::fmt;
use std::time::{Duration, Instant};

/// Every integer key under a prefix, in one script run (one round trip):
/// `ARGV[1]` the SCAN pattern, `ARGV[2]` the reserved prefix to skip.
const ALL_SCRIPT: &str = include_str!("scripts/all.lua");

/// Reads fleet-wide totals from Redis, under the keys a
/// [`RedisSink`](crate::export::redis::RedisSink) with the same prefix writes,
/// through a cache: any number of reads within the TTL cost at most one
/// round trip per key set.
///
/// Make a key set once ([`key`](Self::key), [`keys`](Self::keys),
/// [`all`](Self::all)) and read it as often as needed: a read served from
/// the cache is a clock read and a few atomic loads. With Redis down, a
/// read returns the last values with their age ([`Reading::age`]), or
/// [`FleetReadError`] if the set was never read. Nothing here touches a
/// counter or an add.
///
/// The totals are what Redis holds: this process's counts not yet
/// exported (see [`Exporter::pending`](crate::export::Exporter::pending)) are not
/// in them.
///
/// ```no_run
/// use shardcount::fleet::FleetReader;
/// use std::time::Duration;
///
/// let reader = FleetReader::new("redis://127.0.0.1:6379", "fleet:", Duration::from_secs(1)).unwrap();
/// let hits = reader.key("hits");
/// match hits.total() {
///     Ok(r) => println!("{} hits across the fleet, {:?} old", r.value, r.age),
///     Err(e) => eprintln!("{e}"),
/// }
/// ```
#[derive(Clone)]
pub struct FleetReader {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    prefix: String,
    ttl: Duration,
    timeout: Duration,
    base: Instant,
    round_trips: AtomicU64,
}

/// A value read through the cache.
///
/// ```
/// let r = shardcount::fleet::Reading { value: 3, age: std::time::Duration::ZERO };
/// assert_eq!(r.value, 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The value (a key's, or the set's sum).
    pub value: i64,
    /// How long ago Redis was read for it (about the TTL at most while
    /// Redis answers; more after failed refreshes).
    pub age: Duration,
}

/// A key set that was never read: Redis could not be reached or refused
/// the read. Holds the cause.
///
/// ```
/// let e = shardcount::fleet::FleetReadError("connection refused".into());
/// assert_eq!(e.to_string(), "fleet read: never read: connection refused");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetReadError(pub String);

impl fmt::Display for FleetReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fleet read: never read: {}", self.0)
    }
}

impl std::error::Error for FleetReadError {}

impl FleetReader {
    /// A reader of keys under `prefix` on the server at `url`, caching each
    /// key set for `ttl`. Connects lazily, per key set.
    ///
    /// # Errors
    ///
    /// [`FleetReadError`] if `url` cannot be parsed.
    ///
    /// ```
    /// use shardcount::fleet::FleetReader;
    /// let r = FleetReader::new("redis://127.0.0.1:1", "app:", std::time::Duration::from_secs(2)).unwrap();
    /// assert_eq!(r.round_trips(), 0);
    /// ```
    pub fn new(url: &str, prefix: &str, ttl: Duration) -> Result<FleetReader, FleetReadError> {
        Ok(FleetReader {
            shared: Arc::new(Shared {
                client: Client::open(url).map_err(|e| FleetReadError(e.to_string()))?,
                prefix: prefix.to_owned(),
                ttl,
                timeout: Duration::from_secs(2),
                base: Instant::now(),
                round_trips: AtomicU64::new(0),
            }),
        })
    }

    /// Sets the connect, read and write timeout (default 2 s) of the key
    /// sets made after it.
    ///
    /// # Panics
    ///
    /// If `timeout` is zero (std refuses a zero socket timeout: every read
    /// would fail).
    ///
    /// ```
    /// use shardcount::fleet::FleetReader;
    /// use std::time::Duration;
    /// let r = FleetReader::new("redis://127.0.0.1:1", "", Duration::from_secs(1))
    ///     .unwrap()
    ///     .with_timeout(Duration::from_millis(200));
    /// # drop(r);
    /// ```
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> FleetReader {
        assert!(
            !timeout.is_zero(),
            "shardcount: FleetReader::with_timeout: the timeout must not be zero"
        );
        let s = &self.shared;
        FleetReader {
            shared: Arc::new(Shared {
                client: s.client.clone(),
                prefix: s.prefix.clone(),
                ttl: s.ttl,
                timeout,
                base: s.base,
                round_trips: AtomicU64::new(s.round_trips.load(Ordering::Relaxed)),
            }),
        }
    }

    /// One key (`<prefix><key>`).
    ///
    /// ```
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:1", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// let hits = reader.key("hits");
    /// assert_eq!(hits.keys(), ["hits"]);
    /// ```
    #[must_use]
    pub fn key(&self, key: &str) -> FleetKeys {
        self.keys([key])
    }

    /// Several keys, read together (one `MGET` per refresh); absent keys
    /// read 0, and no key at all reads a total of 0 with no round trip.
    ///
    /// ```
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:1", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// let codes = reader.keys(["status_200", "status_500"]);
    /// assert_eq!(codes.keys().len(), 2);
    /// ```
    #[must_use]
    pub fn keys<I, K>(&self, keys: I) -> FleetKeys
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_owned()).collect();
        FleetKeys::new(Arc::clone(&self.shared), Some(keys))
    }

    /// Every integer key under the prefix (keys starting with
    /// [`RESERVED_PREFIX`](crate::export::RESERVED_PREFIX) after it excluded),
    /// found by a `SCAN` inside one script run: one round trip per refresh,
    /// but the server walks its whole keyspace meanwhile, so prefer
    /// [`keys`](Self::keys) on a large database. Read per key with
    /// [`FleetKeys::values`].
    ///
    /// ```
    /// # use shardcount::fleet::FleetReader;
    /// # let reader = FleetReader::new("redis://127.0.0.1:1", "app:", std::time::Duration::from_secs(1)).unwrap();
    /// let everything = reader.all();
    /// assert!(everything.keys().is_empty()); // known after a read
    /// ```
    #[must_use]
    pub fn all(&self) -> FleetKeys {
        FleetKeys::new(Arc::clone(&self.shared), None)
    }

    /// Redis round trips made by this reader's key sets so far (attempts:
    /// a failed connect counts too).
    ///
    /// ```
    /// # use shardcount::fleet::FleetReader;
    /// let reader = FleetReader::new("redis://127.0.0.1:1", "", std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(reader.round_trips(), 0);
    /// ```
    #[must_use]
    pub fn round_trips(&self) -> u64 {
        // Relaxed: a tally.
        self.shared.round_trips.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for FleetReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetReader")
            .field("prefix", &self.shared.prefix)
            .field("ttl", &self.shared.ttl)
            .finish_non_exhaustive()
    }
}

struct Refresh {
    conn: Option<Connection>,
    last_error: Option<String>,
}

/// A cached key set of a [`FleetReader`]; see there. Share it (by
/// reference or in an `Arc`) among the threads that read it.
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
    shared: Arc<Shared>,
    /// Fixed keys (without the prefix), or `None` for every key.
    fixed: Option<Vec<String>>,
    values: Box<[AtomicI64]>,
    total: AtomicI64,
    stamp: AtomicU64,
    due: AtomicU64,
    refresh: Mutex<Refresh>,
    /// Every key's value for `all()` sets, replaced on each refresh.
    listing: Mutex<Vec<(String, i64)>>,
}

impl FleetKeys {
    fn new(shared: Arc<Shared>, fixed: Option<Vec<String>>) -> FleetKeys {
        let n = fixed.as_ref().map_or(0, Vec::len);
        FleetKeys {
            shared,
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

    /// The set's keys (without the prefix); for an [`all`](FleetReader::all)
    /// set, those of the last refresh.
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
        self.shared.base.elapsed().as_nanos() as u64
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
        let ttl = u64::try_from(self.shared.ttl.as_nanos()).unwrap_or(u64::MAX);
        let got = self.query(r);
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

    fn query(&self, r: &mut Refresh) -> Result<Vec<(String, i64)>, Failure> {
        let s = &self.shared;
        if self.fixed.as_ref().is_some_and(Vec::is_empty) {
            // `MGET` needs a key: no key reads nothing, with no round trip.
            return Ok(Vec::new());
        }
        // Relaxed: a tally (of attempts: a failed connect counts too).
        s.round_trips.fetch_add(1, Ordering::Relaxed);
        if r.conn.is_none() {
            let conn = s.client.get_connection_with_timeout(s.timeout)?;
            conn.set_read_timeout(Some(s.timeout))?;
            conn.set_write_timeout(Some(s.timeout))?;
            r.conn = Some(conn);
        }
        let conn = r.conn.as_mut().expect("connected above");
        match &self.fixed {
            Some(keys) => {
                let full: Vec<String> = keys.iter().map(|k| format!("{}{k}", s.prefix)).collect();
                // As strings: one value that is not an integer names its
                // key (decoding all as integers fails the set, nameless).
                let got: Vec<Option<String>> = redis::cmd("MGET").arg(&full).query(conn)?;
                keys.iter()
                    .zip(got)
                    .map(|(k, v)| match v.map(|v| v.parse::<i64>()) {
                        None => Ok((k.clone(), 0)),
                        Some(Ok(v)) => Ok((k.clone(), v)),
                        Some(Err(_)) => Err(Failure {
                            message: format!("{}{k} is not an integer", s.prefix),
                            answered: true,
                        }),
                    })
                    .collect()
            }
            None => {
                let pattern = format!("{}*", glob_escape(&s.prefix));
                let reserved = format!("{}{}", s.prefix, crate::export::RESERVED_PREFIX);
                let flat: Vec<String> = redis::cmd("EVAL")
                    .arg(ALL_SCRIPT)
                    .arg(0)
                    .arg(pattern)
                    .arg(reserved)
                    .query(conn)?;
                let mut out: Vec<(String, i64)> = flat
                    .chunks_exact(2)
                    .filter_map(|kv| {
                        let key = kv[0].strip_prefix(&s.prefix)?;
                        Some((key.to_owned(), kv[1].parse().ok()?))
                    })
                    .collect();
                out.sort();
                Ok(out)
            }
        }
    }
}

/// Why a fetch failed, and whether Redis answered (the connection is then
/// in step and kept).
struct Failure {
    message: String,
    answered: bool,
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Failure {
        Failure {
            answered: crate::export::redis::answered(&e),
            message: e.to_string(),
        }
    }
}

impl fmt::Debug for FleetKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetKeys")
            .field("keys", &self.fixed)
            .finish_non_exhaustive()
    }
}

/// `prefix` with SCAN's glob characters escaped.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_escape_escapes_pattern_characters() {
        assert_eq!(glob_escape("fleet:"), "fleet:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

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
