//! `FleetReader` itself: a server's settings, and the key sets made from them.

use super::keys::FleetKeys;
use super::reading::FleetReadError;
use super::server::{Backend, Server};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::Arc;
use redis::Client;
use std::fmt;
use std::time::{Duration, Instant};

/// Reads fleet-wide totals from Redis, under the keys a
/// [`RedisSink`](crate::export::redis::RedisSink) with the same prefix
/// writes, through a cache: any number of reads within the TTL cost at
/// most one round trip per key set.
///
/// Make a key set once ([`key`](Self::key), [`keys`](Self::keys),
/// [`all`](Self::all)) and read it as often as needed: a read served from
/// the cache is a clock read and a few atomic loads. With Redis down, a
/// read returns the last values with their age ([`Reading::age`]), or
/// [`FleetReadError`] if the set was never read. Nothing here touches a
/// counter or an add.
///
/// [`Reading::age`]: super::reading::Reading::age
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
    server: Arc<Server>,
}

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
            server: Arc::new(Server {
                backend: Backend::Single(
                    Client::open(url).map_err(|e| FleetReadError(e.to_string()))?,
                ),
                prefix: prefix.to_owned(),
                ttl,
                timeout: Duration::from_secs(2),
                base: Instant::now(),
                round_trips: AtomicU64::new(0),
            }),
        })
    }

    /// A reader of the keys a
    /// [`RedisClusterSink`](crate::export::redis_cluster::RedisClusterSink)
    /// writes where `keys` puts them, in the Redis Cluster reachable at any
    /// of `nodes` (feature `redis-cluster`), caching each key set for
    /// `ttl`. A refresh reads each bucket's keys with one script call, all
    /// in one cluster pipeline: one round trip per master, to every master
    /// at once; redirects are followed and a failover's new topology is
    /// learned by reconnecting. Connects lazily, per key set. A refresh
    /// may take several network timeouts (the client's retries), or wait
    /// on a node that accepts connections but never answers (the cluster
    /// module's [Timeouts](crate::export::redis_cluster#timeouts)).
    ///
    /// # Errors
    ///
    /// [`FleetReadError`] if an address cannot be parsed or none is given.
    ///
    /// ```
    /// use shardcount::export::redis_cluster::ClusterKeys;
    /// use shardcount::fleet::FleetReader;
    /// let keys = ClusterKeys::new("app:", 16);
    /// let r = FleetReader::cluster(&["redis://127.0.0.1:1"], keys, std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(r.round_trips(), 0);
    /// ```
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn cluster<S: AsRef<str>>(
        nodes: &[S],
        keys: crate::export::redis_cluster::ClusterKeys,
        ttl: Duration,
    ) -> Result<FleetReader, FleetReadError> {
        let nodes: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        redis::cluster::ClusterClientBuilder::new(nodes.clone())
            .build()
            .map_err(|e| FleetReadError(e.to_string()))?;
        Ok(FleetReader {
            server: Arc::new(Server {
                prefix: keys.prefix().to_owned(),
                backend: Backend::Cluster { nodes, keys },
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
        let s = &self.server;
        FleetReader {
            server: Arc::new(Server {
                backend: s.backend.clone(),
                prefix: s.prefix.clone(),
                ttl: s.ttl,
                timeout,
                base: s.base,
                round_trips: AtomicU64::new(s.round_trips.load(Ordering::Relaxed)),
            }),
        }
    }

    /// One key (`<prefix><key>`, or where the cluster layout puts it).
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
        FleetKeys::new(Arc::clone(&self.server), Some(keys))
    }

    /// Every integer key under the prefix (keys starting with
    /// [`RESERVED_PREFIX`](crate::export::RESERVED_PREFIX) after it, and
    /// keys whose names are not UTF-8, excluded),
    /// found by a `SCAN` inside one script run: one round trip per refresh,
    /// but the server walks its whole keyspace meanwhile, so prefer
    /// [`keys`](Self::keys) on a large database. On a cluster, every
    /// master runs the script (one round trip each, one after another), and
    /// only keys in their bucket's slot count. Read per key with
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
        FleetKeys::new(Arc::clone(&self.server), None)
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
        self.server.round_trips.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for FleetReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetReader")
            .field("prefix", &self.server.prefix)
            .field("ttl", &self.server.ttl)
            .finish_non_exhaustive()
    }
}
