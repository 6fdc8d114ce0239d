//! `FleetStock` itself: the public type, over the lease (`lease.rs`) and
//! its connection (`link.rs`).

use super::config::FleetStockConfig;
use super::error::FleetError;
use super::lease::Inner;
use super::link::{Link, Part, Place};
use super::op::{assert_amount, Kind, Op, MAX_AMOUNT};
use super::stats::FleetStockStats;
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, Arc, Mutex};
use crate::stock::Stock;
use crate::worker::Worker;
use redis::Client;
use std::fmt;

/// `init`'s script: sets `KEYS[1]` to `ARGV[1]` only if it does not exist
/// (1), leaves a string as it is (0), refuses another type (-1).
const INIT_SCRIPT: &str = include_str!("../scripts/init.lua");

/// A stock of units kept in Redis that many processes sell from, never
/// oversold.
///
/// Each process holds a *lease*: units taken from Redis into a local
/// [`Stock`]. [`try_sub`](Self::try_sub) takes from the lease, lock-free;
/// when the lease is short, one atomic script call takes up to
/// [`chunk`](FleetStockConfig::chunk) more (never below zero). Unused
/// units go back on [`flush`](Self::flush), on drop, and when the lease
/// has been idle for [`idle`](FleetStockConfig::idle).
///
/// # What is exact
///
/// * **Never oversold:** Redis only grants what its total holds, and each
///   unit is in one place: Redis, one lease, a return in flight, or sold.
///   Across all processes, successful takes never exceed the initial stock
///   plus what was added.
/// * **Retries never double:** every take, return and add carries the
///   process's token and a sequence number recorded in Redis in the same
///   script run; a call whose reply was lost is resent with the same number
///   and gets the recorded answer (the same grant; a repeated return or add
///   adds nothing).
/// * **Clean failures:** `try_sub(n)` fails with
///   [`FleetError::Insufficient`] only when this lease cannot cover `n` and
///   a take found Redis short (it takes what was left). At that moment
///   other live processes' leases may hold units: each at most `L =
///   max(chunk, n_max) + n_max − 1` (`n_max` the largest `n` any process
///   asks for; for `try_sub(1)`, `L = chunk`), so at most `(processes − 1)
///   × L` units, which come back as those processes sell, flush or idle.
///
/// # What a crash costs
///
/// * **A process killed (`kill -9`):** its lease is lost, never reclaimed
///   (reclaiming a lease from a process that is only slow would oversell).
///   Stranded: at most `L` units (above; for `try_sub(1)`, one chunk): its
///   lease, or a return in flight (the lease is empty then: no
///   take is sent until the return is confirmed), or a take whose reply
///   it never read plus what the lease held (less than `n_max`) when it
///   asked. The leases hash records each
///   token's net take (`"<seq> <amount> <net>"`), so an operator can see
///   which tokens hold units.
/// * **Redis restarts:** with `appendonly yes` and `appendfsync always`,
///   every reply follows its fsync, nothing confirmed is lost, and
///   nothing can be oversold. With Redis 7.2 or later and AOF on, each take
///   also waits (pipelined, no extra round trip) for `WAITAOF 1 0`, so
///   `everysec` is safe too. On older Redis under `everysec`, Redis may
///   confirm a take whose AOF write it had postponed (up to 2 s while a
///   fsync is slow; any unsynced second on a machine crash): if it then
///   dies, the take is undone in Redis while the process keeps and sells
///   the units, and Redis can grant them again. The oversell is bounded by
///   the units granted in that window (at most the takes of the last ~2 s),
///   and shows as [`FleetStockStats::lost_ops`]. A lost return or add only
///   strands or drops units: it never oversells. A connection that Redis
///   closed (a restart, an idle `timeout`) is found on the next call, which
///   is sent again, once, on a fresh connection (the same number: applied
///   at most once), so the first call after a restart does not fail, and a
///   drop's one return reaches the restarted Redis.
/// * **A `fork` after `new`:** parent and child would share the token and
///   its numbers, and one's take would be answered as a repeat of the
///   other's. Make the stock in the process that uses it.
///
/// # Example
///
/// ```no_run
/// use shardcount::fleet::{FleetError, FleetStock, FleetStockConfig};
///
/// let stock = FleetStock::new(
///     "redis://127.0.0.1:6379",
///     "shop:",
///     "sku-42",
///     FleetStockConfig { chunk: 50, ..FleetStockConfig::default() },
/// )
/// .unwrap();
/// stock.add(1_000).unwrap(); // restock (once for the fleet)
/// match stock.try_sub(1) {
///     Ok(()) => { /* sold one */ }
///     Err(FleetError::Insufficient(_)) => { /* sold out */ }
///     Err(e) => eprintln!("{e}"), // Redis unreachable: try later
/// }
/// stock.flush().unwrap(); // give the unused lease back
/// ```
pub struct FleetStock {
    pub(super) inner: Arc<Inner>,
    worker: Option<Worker>,
}

impl FleetStock {
    /// A stock named `name` under `prefix` (Redis key `<prefix><name>`) on
    /// the server at `url`. Connects lazily.
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if `url` cannot be parsed;
    /// [`FleetError::Invalid`] if `config.timeout` is zero.
    ///
    /// # Panics
    ///
    /// If `config.chunk` is 0 or 2<sup>53</sup> or more, or the worker
    /// thread cannot be spawned.
    ///
    /// ```
    /// use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:1", "p:", "n", FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.lease(), 0);
    /// let zero = FleetStockConfig { timeout: std::time::Duration::ZERO, ..FleetStockConfig::default() };
    /// let e = FleetStock::new("redis://127.0.0.1:1", "p:", "n", zero).unwrap_err();
    /// assert_eq!(e.to_string(), "fleet stock: invalid: FleetStockConfig::timeout must not be zero");
    /// ```
    pub fn new(
        url: &str,
        prefix: &str,
        name: &str,
        config: FleetStockConfig,
    ) -> Result<FleetStock, FleetError> {
        FleetStock::check(&config)?;
        let client = Client::open(url).map_err(|e| FleetError::Redis(e.to_string()))?;
        let part = Part::new(
            format!("{prefix}{name}"),
            format!("{prefix}__leases:{name}"),
            None,
        );
        Ok(FleetStock::start(
            Link::new(Place::Single(client), vec![part]),
            config,
        ))
    }

    /// A stock named `name` under `prefix`, split over up to
    /// `split.parts` parts of a Redis Cluster reachable at any of `nodes`
    /// (feature `redis-cluster`; see [`StockSplit`](super::StockSplit) and the module's
    /// protocol). It starts as one part, `<prefix>{<name>#0}`; the parts in
    /// use double while one of them is the bound and halve when the load
    /// falls. Everything else is as for [`new`](Self::new):
    /// [`try_sub`](Self::try_sub) fails with
    /// [`Insufficient`](FleetError::Insufficient) only when every part was
    /// short, [`remaining`](Self::remaining) sums the parts,
    /// [`add`](Self::add) and [`init`](Self::init) go to part 0.
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if an address cannot be parsed or none is
    /// given; [`FleetError::Invalid`] if `config.timeout` is zero,
    /// `split.parts` is not in 1..=64, or `prefix` or `name` holds `{` or
    /// `}` (they would change the keys' hash tags).
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    ///
    /// ```
    /// use shardcount::fleet::{FleetStock, FleetStockConfig, StockSplit};
    /// let nodes = ["redis://127.0.0.1:1"];
    /// let s = FleetStock::cluster(&nodes, "shop:", "sku", StockSplit::default(), FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.parts_in_use(), 1);
    /// let bad = StockSplit { parts: 0, ..StockSplit::default() };
    /// assert!(FleetStock::cluster(&nodes, "shop:", "sku", bad, FleetStockConfig::default()).is_err());
    /// ```
    #[cfg(feature = "redis-cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
    pub fn cluster<S: AsRef<str>>(
        nodes: &[S],
        prefix: &str,
        name: &str,
        split: super::load::StockSplit,
        config: FleetStockConfig,
    ) -> Result<FleetStock, FleetError> {
        FleetStock::check(&config)?;
        if !(1..=64).contains(&split.parts) {
            return Err(FleetError::Invalid(format!(
                "StockSplit::parts must be in 1..=64, not {}",
                split.parts
            )));
        }
        if prefix.contains(['{', '}']) || name.contains(['{', '}']) {
            return Err(FleetError::Invalid(
                "a split stock's prefix and name must not hold `{` or `}`".into(),
            ));
        }
        let nodes: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        redis::cluster::ClusterClientBuilder::new(nodes.clone())
            .build()
            .map_err(|e| FleetError::Redis(e.to_string()))?;
        let tag = |j: usize| format!("{prefix}{{{name}#{j}}}");
        let parts = (0..split.parts)
            .map(|j| {
                Part::new(
                    tag(j),
                    format!("{}__leases", tag(j)),
                    Some(format!("{}__calls", tag(j))),
                )
            })
            .collect();
        let durable = match split.durability {
            crate::export::redis_cluster::Durability::Replicas { replicas, timeout } => {
                Some((replicas, timeout))
            }
            _ => None,
        };
        let mut link = Link::new(Place::Cluster { nodes, durable }, parts);
        link.split = Some(super::load::Splitter {
            split,
            parts_key: format!("{}__parts", tag(0)),
            last: None,
            quiet: 0,
        });
        Ok(FleetStock::start(link, config))
    }

    /// Starts the stock over `link`, with its idle worker.
    pub(super) fn start(link: Link, config: FleetStockConfig) -> FleetStock {
        let check = (config.idle / 4).max(crate::worker::MIN_WAIT);
        let inner = Arc::new(Inner {
            local: Stock::new(0),
            key: link.parts[0].stock_key.clone(),
            link: Mutex::new(link),
            config,
            round_trips: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            lost_ops: AtomicU64::new(0),
        });
        let worker = Worker::spawn("shardcount-fleet-stock", check, {
            let inner = Arc::clone(&inner);
            move || {
                #[cfg(feature = "redis-cluster")]
                inner.split_pass();
                inner.idle_pass();
            }
        });
        FleetStock {
            inner,
            worker: Some(worker),
        }
    }

    /// Checks a configuration the way [`new`](Self::new) documents.
    pub(super) fn check(config: &FleetStockConfig) -> Result<(), FleetError> {
        assert!(
            config.chunk >= 1 && config.chunk < MAX_AMOUNT,
            "shardcount: FleetStockConfig::chunk must be in 1..2^53, got {}",
            config.chunk
        );
        if config.timeout.is_zero() {
            // std refuses a zero socket timeout: every call would fail.
            return Err(FleetError::Invalid(
                "FleetStockConfig::timeout must not be zero".into(),
            ));
        }
        Ok(())
    }

    /// Takes `n` units: from the lease, lock-free, while it holds `n`;
    /// otherwise one script call refills it (see the type docs).
    /// `try_sub(0)` always succeeds.
    ///
    /// # Errors
    ///
    /// [`FleetError::Insufficient`] when the lease and Redis are both
    /// short (nothing taken); [`FleetError::Redis`] when the lease is short
    /// and Redis cannot be reached (the lease keeps serving what it holds).
    ///
    /// # Panics
    ///
    /// If `n` is 2<sup>53</sup> or more and the lease cannot cover it.
    ///
    /// ```no_run
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:6379", "p:", "n", FleetStockConfig::default()).unwrap();
    /// let sold = (0..10).filter(|_| s.try_sub(1).is_ok()).count();
    /// # drop(sold);
    /// ```
    #[inline]
    pub fn try_sub(&self, n: u64) -> Result<(), FleetError> {
        if self.inner.local.try_sub(n).is_ok() {
            return Ok(());
        }
        self.inner.refill(n)
    }

    /// Adds `n` units to the Redis total (a restock), exactly once even if
    /// the call is retried. Returns the total after it.
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if Redis could not confirm it: the next call
    /// sends it again (applied at most once). [`FleetError::Invalid`] if the
    /// Redis total would reach 2<sup>53</sup> (what its script can hold
    /// exactly): this request added nothing, but an earlier request of
    /// the same add (one that failed with [`FleetError::Redis`], or one a
    /// lost connection left queued) may still land once, if it fits then.
    /// An add that failed with `Redis` is resent by the next call, which
    /// reports such a refusal as its own `Invalid`. Units leased out are not in that total
    /// and come back to it: keep the total plus every lease below
    /// 2<sup>53</sup>, as a return past it leaves the stock unreadable
    /// ([`FleetError::Corrupt`] on every call) until fixed by hand.
    ///
    /// # Panics
    ///
    /// If `n` is 2<sup>53</sup> or more.
    ///
    /// ```no_run
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:6379", "p:", "n", FleetStockConfig::default()).unwrap();
    /// let total = s.add(500).unwrap();
    /// # drop(total);
    /// ```
    pub fn add(&self, n: u64) -> Result<i64, FleetError> {
        // Before the lock: a panic under it would poison it.
        assert_amount(n, "add");
        let mut link = lock(&self.inner.link);
        Ok(self.inner.run(&mut link, 0, Kind::Add, n)?.stock)
    }

    /// Gives the whole lease back to Redis now, after resending any
    /// unconfirmed operation. Returns the units this call saw confirmed
    /// returned: the lease, and an earlier return it resent (one that a
    /// failed `flush` left in flight). Units returned otherwise (by the
    /// idle worker, by a take that resent a return, by a call that then
    /// failed) count only in [`stats`](Self::stats)' `returned`.
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if Redis could not confirm it; the units stay
    /// in flight and the next call sends the same return again.
    /// [`FleetError::Invalid`] if an [`add`](Self::add) that had failed
    /// was refused as too large when resent here: the lease was still
    /// returned.
    ///
    /// ```no_run
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:6379", "p:", "n", FleetStockConfig::default()).unwrap();
    /// s.try_sub(1).ok();
    /// let back = s.flush().unwrap();
    /// assert_eq!(s.lease(), 0);
    /// # drop(back);
    /// ```
    pub fn flush(&self) -> Result<u64, FleetError> {
        let mut link = lock(&self.inner.link);
        self.inner.give_back(&mut link)
    }

    /// Sets the stock to `n` if it was never set: the way to start a fleet
    /// whose processes all run the same code. One `SET NX`, atomic in
    /// Redis: however many processes call it, at once or later, only the
    /// first sets it, and a stock already sold down (even to 0) is left
    /// as it is. Returns whether this call set it. Restock with
    /// [`add`](Self::add).
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if Redis could not be reached (safe to call
    /// again: it sets the stock at most once); [`FleetError::Corrupt`] if
    /// the key holds another type than a string (nothing is changed).
    ///
    /// # Panics
    ///
    /// If `n` is 2<sup>53</sup> or more.
    ///
    /// ```no_run
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:6379", "shop:", "tickets", FleetStockConfig::default()).unwrap();
    /// s.init(10_000).unwrap(); // every process may call it: the stock is 10,000, once
    /// s.try_sub(1).ok();
    /// ```
    pub fn init(&self, n: u64) -> Result<bool, FleetError> {
        assert_amount(n, "init");
        let mut link = lock(&self.inner.link);
        let key = link.parts[0].stock_key.clone();
        let timeout = self.inner.config.timeout;
        // Relaxed: a reporting tally.
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(INIT_SCRIPT).arg(1).arg(&key).arg(n);
        // `SET` only if absent: a resend sets at most once.
        let got: Result<i64, redis::RedisError> = link.query(timeout, &cmd);
        match got.map_err(|e| link.failed(&e, &key))? {
            -1 => Err(FleetError::Corrupt(format!(
                "{key} holds another type than the stock's"
            ))),
            set => Ok(set == 1),
        }
    }

    /// Units in this process's lease now (a [`Stock::sum`]).
    ///
    /// ```
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:1", "p:", "n", FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.lease(), 0);
    /// ```
    #[must_use]
    pub fn lease(&self) -> u64 {
        self.inner.local.sum()
    }

    /// The undistributed units in Redis (one `GET`; absent reads 0).
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if Redis cannot be reached,
    /// [`FleetError::Corrupt`] if the key is not an integer.
    ///
    /// ```no_run
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:6379", "p:", "n", FleetStockConfig::default()).unwrap();
    /// println!("{} left in Redis", s.remaining().unwrap());
    /// ```
    pub fn remaining(&self) -> Result<i64, FleetError> {
        let mut link = lock(&self.inner.link);
        let timeout = self.inner.config.timeout;
        let mut total = 0i64;
        for p in 0..link.parts.len() {
            let key = link.parts[p].stock_key.clone();
            let got: Result<Option<String>, redis::RedisError> =
                link.query(timeout, redis::cmd("GET").arg(&key));
            let v = got.map_err(|e| link.failed(&e, &key))?;
            let corrupt = || FleetError::Corrupt(format!("{key} is not an integer below ±2^53"));
            let n = v.map_or(Ok(0), |s| {
                let n: i64 = s.parse().map_err(|_| corrupt())?;
                // The script's bound (its arithmetic is in doubles).
                if n.unsigned_abs() >= MAX_AMOUNT {
                    return Err(corrupt());
                }
                Ok(n)
            })?;
            total += n;
        }
        Ok(total)
    }

    /// How many parts the stock is split over, as this process last saw
    /// it: 1 for a stock made by [`new`](Self::new); for one made by
    /// `FleetStock::cluster` (feature `redis-cluster`), what its idle
    /// worker last read.
    ///
    /// ```
    /// use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:1", "p:", "n", FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.parts_in_use(), 1);
    /// ```
    #[must_use]
    pub fn parts_in_use(&self) -> usize {
        lock(&self.inner.link).active
    }

    /// This process's token in the leases hash (`<prefix>__leases:<name>`).
    ///
    /// ```
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:1", "p:", "n", FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.token().len(), 32);
    /// ```
    #[must_use]
    pub fn token(&self) -> String {
        lock(&self.inner.link).token.clone()
    }

    /// Counts so far (see [`FleetStockStats`]).
    ///
    /// ```
    /// # use shardcount::fleet::{FleetStock, FleetStockConfig};
    /// let s = FleetStock::new("redis://127.0.0.1:1", "p:", "n", FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.stats().round_trips, 0);
    /// ```
    #[must_use]
    pub fn stats(&self) -> FleetStockStats {
        let link = lock(&self.inner.link);
        let i = &self.inner;
        // Relaxed: reporting tallies (see the module notes).
        FleetStockStats {
            round_trips: i.round_trips.load(Ordering::Relaxed),
            granted: i.granted.load(Ordering::Relaxed),
            returned: i.returned.load(Ordering::Relaxed),
            lost_ops: i.lost_ops.load(Ordering::Relaxed),
            in_flight: link
                .parts
                .iter()
                .map(|p| match p.unresolved {
                    Some(Op {
                        kind: Kind::Return,
                        amount,
                        ..
                    }) => amount,
                    _ => 0,
                })
                .sum(),
        }
    }
}

impl Drop for FleetStock {
    /// Stops the idle worker and returns the lease (one try; if Redis does
    /// not confirm it, those units are stranded, as after a crash).
    fn drop(&mut self) {
        if let Some(mut w) = self.worker.take() {
            w.stop();
        }
        let mut link = lock(&self.inner.link);
        // `Invalid`: a resent add refused as too large; the lease still went
        // back (`give_back`).
        let returned = matches!(
            self.inner.give_back(&mut link),
            Ok(_) | Err(FleetError::Invalid(_))
        );
        if returned && !link.stale_possible {
            // Nothing of this token is left in flight: its record guards
            // nothing any more (see the module notes).
            let token = link.token.clone();
            let timeout = self.inner.config.timeout;
            for p in 0..link.parts.len() {
                let key = link.parts[p].leases_key.clone();
                // Relaxed: a reporting tally.
                self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
                let _: Result<(), _> = link.query(timeout, redis::cmd("HDEL").arg(key).arg(&token));
            }
        }
    }
}

impl fmt::Debug for FleetStock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetStock")
            .field("key", &self.inner.key)
            .field("lease", &self.lease())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}
