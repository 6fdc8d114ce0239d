//! `FleetStock` (feature `redis`): one inventory in Redis that many
//! processes sell from, each through a lease held in a local `Stock`.
//!
//! # Protocol
//!
//! * Redis holds the undistributed units at `<prefix><name>` (an integer
//!   string) and, per process, its last operation in the hash
//!   `<prefix>__leases:<name>`: field = the process's token (a random
//!   `WriterId`), value = `"<seq> <amount> <net>"`: the last operation's
//!   number, what it granted (or returned or added), and the units the
//!   token took net of what it returned (sold + still leased).
//! * `local: Stock` is this process's lease. `try_sub` takes from it,
//!   lock-free. When it is short, the caller takes `link` (a mutex: one
//!   refill at a time), retries the lease, then runs [`LEASE_SCRIPT`] once:
//!   take `min(want, stock)`, never below zero.
//! * Every operation (take, return, add) gets the next sequence number of
//!   the token and is kept in `link.unresolved` until its reply arrives. A
//!   failed call (timeout, lost connection, lost reply) leaves it there,
//!   and it is sent again, unchanged, before any other operation. The
//!   script answers a repeated number with the recorded amount and changes
//!   nothing, so a retried take grants once and a retried return adds once.
//!   The record keeps only the last number: a token has at most one
//!   operation outstanding, so no older one can come back.
//! * Returns take the whole lease out of `local` first (`drain`), then send
//!   it; until confirmed those units are in flight (in neither place).
//! * The idle worker (`worker::Worker`) returns the lease when `local`
//!   has not changed for `idle`; it only tries the link lock, never
//!   waiting behind a refill.
//! * Poison: every documented panic (an amount of 2^53 or more) is checked
//!   before `link` is taken, and `Link` is consistent at every point
//!   where anything else could panic (an op in flight stays in
//!   `unresolved` and is resent), so `link` is locked ignoring poison,
//!   by callers and by the idle worker alike.
//! * A clean drop (lease returned and confirmed) deletes the token's
//!   field, unless a request of this token may still be queued in Redis
//!   on a connection it dropped (`stale_possible`): such a delayed copy
//!   finds the record and is refused as old; without it, it would be
//!   applied again.
//!
//! Orderings: the stats counters are `Relaxed` (monotonic tallies, read
//! for reporting only); `local` has its own protocol; the mutex orders
//! everything else.

use crate::export::redis::answered;
use crate::export::WriterId;
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, try_lock, Arc, Mutex};
use crate::stock::{Insufficient, Stock};
use crate::worker::Worker;
use redis::{Client, Connection, Value};
use std::fmt;
use std::time::{Duration, Instant};

/// The lease script (`src/fleet/scripts/lease.lua`). `KEYS[1]` is the
/// stock key, `KEYS[2]` the leases hash; `ARGV` = token, sequence number,
/// kind (`t` take, `r` return, `a` add), amount. Replies
/// `{1, amount, stock_after, lost_ops}` when applied (for a take, `amount`
/// is the grant: `min(asked, stock)`, never below zero);
/// `{0, amount, stock_now, 0}` when the number is the token's last one (a
/// retry: nothing changes, the recorded amount is repeated); `{-2, last}`
/// for an older number; `{-3, stock}` for an add that would take the stock
/// to 2<sup>53</sup> or more (nothing changes, the number is not used);
/// `{-1}` if a key holds something else than this layout (a stock that is
/// not an integer below ±2<sup>53</sup>, a leases key that is not a hash
/// of records). `lost_ops` counts numbers skipped since the token's
/// record: operations Redis confirmed and then lost (an AOF that had not
/// reached the disk).
///
/// ```
/// assert!(shardcount::fleet::LEASE_SCRIPT.contains("DECRBY"));
/// ```
pub const LEASE_SCRIPT: &str = include_str!("scripts/lease.lua");

/// `init`'s script: sets `KEYS[1]` to `ARGV[1]` only if it does not exist
/// (1), leaves a string as it is (0), refuses another type (-1).
const INIT_SCRIPT: &str = include_str!("scripts/init.lua");

/// Every amount and the stock stay below this: Redis runs the script's
/// arithmetic in doubles, exact below 2<sup>53</sup>.
const MAX_AMOUNT: u64 = 1 << 53;

/// How a [`FleetStock`] leases.
///
/// ```
/// let c = shardcount::fleet::FleetStockConfig::default();
/// assert_eq!(c.chunk, 100);
/// ```
#[derive(Clone, Debug)]
pub struct FleetStockConfig {
    /// Units a refill asks for (at least the `n` of the `try_sub` that
    /// needs it). With `n_max` the largest `n` asked, a process's lease
    /// never exceeds `max(chunk, n_max) + n_max − 1` (`chunk` for
    /// `try_sub(1)`), nor does what a crash of it strands (see
    /// [`FleetStock`]).
    pub chunk: u64,
    /// A lease that has not changed (no sale, no refill) for this long goes
    /// back to Redis. Checked every quarter of it, by a background worker;
    /// any value below 4 ms checks every 1 ms (see the crate's worker rule).
    pub idle: Duration,
    /// Connect, read and write timeout of each Redis call; must not be
    /// zero ([`FleetStock::new`] refuses it).
    pub timeout: Duration,
}

impl Default for FleetStockConfig {
    fn default() -> Self {
        FleetStockConfig {
            chunk: 100,
            idle: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
        }
    }
}

/// Why a [`FleetStock`] call failed.
///
/// ```
/// use shardcount::fleet::FleetError;
/// let e = FleetError::Redis("connection refused".into());
/// assert_eq!(e.to_string(), "fleet stock: redis: connection refused");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetError {
    /// The lease and Redis were both short: `available` is what the lease
    /// held plus what Redis held (0) when the take was refused. Other
    /// processes' leases are not counted (see [`FleetStock`]).
    Insufficient(Insufficient),
    /// Redis could not be reached, did not answer in time, or refused the
    /// command for a reason of its own (loading, read-only, out of
    /// memory): worth retrying. The pending operation is sent again,
    /// unchanged, by the next call.
    Redis(String),
    /// Redis answered, but a key under the prefix holds something else than
    /// the stock's layout (another type, a value that is not an integer
    /// below ±2<sup>53</sup>), or another writer changed this process's
    /// record: retrying does not help until the key is repaired. Nothing
    /// was changed, the connection is kept, and the pending operation is
    /// kept and sent again by the next call.
    Corrupt(String),
    /// The call cannot work as given, and retrying it will not help: a
    /// zero `timeout` in [`FleetStock::new`] (the message names the field),
    /// or an [`add`](FleetStock::add) that would take the stock to
    /// 2<sup>53</sup> or more (nothing was added).
    Invalid(String),
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::Insufficient(e) => write!(f, "fleet stock: {e}"),
            FleetError::Redis(e) => write!(f, "fleet stock: redis: {e}"),
            FleetError::Corrupt(e) => write!(f, "fleet stock: {e}"),
            FleetError::Invalid(e) => write!(f, "fleet stock: invalid: {e}"),
        }
    }
}

impl std::error::Error for FleetError {}

/// What a [`FleetStock`] has done so far (counts since it was built).
///
/// ```
/// let s = shardcount::fleet::FleetStockStats::default();
/// assert_eq!((s.round_trips, s.granted, s.lost_ops), (0, 0, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetStockStats {
    /// Script calls sent (retries included): one round trip each.
    pub round_trips: u64,
    /// Units granted by takes.
    pub granted: u64,
    /// Units given back (flush, drop, idle).
    pub returned: u64,
    /// Operations Redis had confirmed and then lost (seen as skipped
    /// numbers in the token's record): after an AOF `everysec` crash, see
    /// [`FleetStock`]'s "Redis restarts".
    pub lost_ops: u64,
    /// Units taken out of the lease for a return not yet confirmed.
    pub in_flight: u64,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Take,
    Return,
    Add,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    seq: u64,
    kind: Kind,
    amount: u64,
}

struct Reply {
    amount: u64,
    stock: i64,
}

/// The Redis side: one connection, used under the `link` mutex.
struct Link {
    client: Client,
    conn: Option<Connection>,
    sha: Option<String>,
    /// Whether the server has WAITAOF (Redis 7.2+) with AOF on; asked once
    /// per connection.
    waitaof: bool,
    token: String,
    seq: u64,
    unresolved: Option<Op>,
    /// The lease as the idle worker last saw it, and since when.
    idle_seen: (u64, Instant),
    /// A request was sent on a connection that was then dropped unanswered:
    /// a copy may still be queued in Redis (see the module notes).
    stale_possible: bool,
    /// The last script call found its connection, opened by an earlier
    /// call, closed by the server (a restart, an idle `timeout`): worth
    /// one resend on a fresh connection.
    closed: bool,
}

struct Inner {
    local: Stock,
    config: FleetStockConfig,
    stock_key: String,
    leases_key: String,
    link: Mutex<Link>,
    round_trips: AtomicU64,
    granted: AtomicU64,
    returned: AtomicU64,
    lost_ops: AtomicU64,
}

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
    inner: Arc<Inner>,
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
        let client = Client::open(url).map_err(|e| FleetError::Redis(e.to_string()))?;
        let check = (config.idle / 4).max(crate::worker::MIN_WAIT);
        let inner = Arc::new(Inner {
            local: Stock::new(0),
            stock_key: format!("{prefix}{name}"),
            leases_key: format!("{prefix}__leases:{name}"),
            link: Mutex::new(Link {
                client,
                conn: None,
                sha: None,
                waitaof: false,
                token: WriterId::random().to_string(),
                seq: 0,
                unresolved: None,
                idle_seen: (0, Instant::now()),
                stale_possible: false,
                closed: false,
            }),
            config,
            round_trips: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            lost_ops: AtomicU64::new(0),
        });
        let worker = Worker::spawn("shardcount-fleet-stock", check, {
            let inner = Arc::clone(&inner);
            move || inner.idle_pass()
        });
        Ok(FleetStock {
            inner,
            worker: Some(worker),
        })
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
    /// sends it again (it is applied once).
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
        Ok(self.inner.run(&mut link, Kind::Add, n)?.stock)
    }

    /// Gives the whole lease back to Redis now, after resending any
    /// unconfirmed operation. Returns the units returned.
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if Redis could not confirm it; the units stay
    /// in flight and the next call sends the same return again.
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
        let key = self.inner.stock_key.clone();
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
        let key = self.inner.stock_key.clone();
        let timeout = self.inner.config.timeout;
        let got: Result<Option<String>, redis::RedisError> =
            link.query(timeout, redis::cmd("GET").arg(&key));
        let v = got.map_err(|e| link.failed(&e, &key))?;
        let corrupt = || FleetError::Corrupt(format!("{key} is not an integer below ±2^53"));
        v.map_or(Ok(0), |s| {
            let n: i64 = s.parse().map_err(|_| corrupt())?;
            // The script's bound (its arithmetic is in doubles).
            if n.unsigned_abs() >= MAX_AMOUNT {
                return Err(corrupt());
            }
            Ok(n)
        })
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
            in_flight: match link.unresolved {
                Some(Op {
                    kind: Kind::Return,
                    amount,
                    ..
                }) => amount,
                _ => 0,
            },
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
        if self.inner.give_back(&mut link).is_ok() && !link.stale_possible {
            // Nothing of this token is left in flight: its record guards
            // nothing any more (see the module notes).
            let (key, token) = (self.inner.leases_key.clone(), link.token.clone());
            if let Ok(conn) = link.connect(self.inner.config.timeout) {
                // Relaxed: a reporting tally.
                self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
                let _: Result<(), _> = redis::cmd("HDEL").arg(key).arg(token).query(conn);
            }
        }
    }
}

impl fmt::Debug for FleetStock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetStock")
            .field("key", &self.inner.stock_key)
            .field("lease", &self.lease())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Inner {
    #[cold]
    #[inline(never)]
    fn refill(&self, n: u64) -> Result<(), FleetError> {
        // Before the lock: a panic under it would poison it.
        assert_amount(n, "try_sub");
        let mut link = lock(&self.link);
        loop {
            // Another thread may have refilled while we waited.
            if self.local.try_sub(n).is_ok() {
                return Ok(());
            }
            // A take whose reply was lost: its grant, resent, may suffice.
            if link.unresolved.is_some() {
                self.settle(&mut link)?;
                continue;
            }
            let want = self.config.chunk.max(n);
            let r = self.run(&mut link, Kind::Take, want)?;
            if r.amount < want && r.stock <= 0 {
                // Redis is empty: this take gathered what was left.
                return match self.local.try_sub(n) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(FleetError::Insufficient(e)),
                };
            }
        }
    }

    /// Drains the lease and sends it back (after any unresolved op).
    fn give_back(&self, link: &mut Link) -> Result<u64, FleetError> {
        self.settle(link)?;
        let units = drain(&self.local);
        if units == 0 {
            return Ok(0);
        }
        self.run(link, Kind::Return, units)?;
        Ok(units)
    }

    /// Sends the unresolved operation, if any, until it is confirmed.
    fn settle(&self, link: &mut Link) -> Result<(), FleetError> {
        if let Some(op) = link.unresolved {
            let r = self.call(link, op)?;
            link.unresolved = None;
            self.effect(op, &r);
        }
        Ok(())
    }

    /// Runs a new operation (after settling the previous one) and applies
    /// its effect on the lease.
    fn run(&self, link: &mut Link, kind: Kind, amount: u64) -> Result<Reply, FleetError> {
        // Callers checked `n` before locking; a chunk is below 2^53 and a
        // lease never holds more than was granted.
        debug_assert!(amount < MAX_AMOUNT);
        self.settle(link)?;
        link.seq += 1;
        let op = Op {
            seq: link.seq,
            kind,
            amount,
        };
        link.unresolved = Some(op);
        let r = self.call(link, op)?;
        link.unresolved = None;
        self.effect(op, &r);
        Ok(r)
    }

    fn effect(&self, op: Op, r: &Reply) {
        // Relaxed: reporting tallies.
        match op.kind {
            Kind::Take => {
                self.local.add(r.amount);
                self.granted.fetch_add(r.amount, Ordering::Relaxed);
            }
            Kind::Return => _ = self.returned.fetch_add(r.amount, Ordering::Relaxed),
            Kind::Add => {}
        }
    }

    /// One script call for `op` (reconnecting and reloading the script as
    /// needed); a NOSCRIPT reply reloads and resends once.
    fn call(&self, link: &mut Link, op: Op) -> Result<Reply, FleetError> {
        let mut r = self.call_once(link, op);
        if link.closed {
            // A connection from before a Redis restart fails on first use
            // though Redis may be up again: resend once, on a fresh one
            // (the same number: applied at most once).
            r = self.call_once(link, op);
        }
        let r = match r {
            Err(FleetError::Redis(e)) if e.contains("NOSCRIPT") => {
                link.sha = None;
                self.call_once(link, op)
            }
            r => r,
        };
        if let Err(FleetError::Invalid(_)) = r {
            // An add refused as too large used no number: drop it, so it
            // is neither resent nor seen as a lost operation.
            debug_assert_eq!(op.seq, link.seq);
            link.unresolved = None;
            link.seq -= 1;
        }
        r
    }

    fn call_once(&self, link: &mut Link, op: Op) -> Result<Reply, FleetError> {
        // Only after a request went out: it may still be queued in Redis.
        let fail = |link: &mut Link, e: String| {
            link.conn = None;
            link.stale_possible = true;
            FleetError::Redis(e)
        };
        let timeout = self.config.timeout;
        let reused = link.conn.is_some();
        link.closed = false;
        if let Err(e) = link.connect(timeout) {
            link.closed = reused && e.is_connection_dropped() && !e.is_timeout();
            return Err(link.failed(&e, &self.stock_key));
        }
        let kind = match op.kind {
            Kind::Take => "t",
            Kind::Return => "r",
            Kind::Add => "a",
        };
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(link.sha.as_deref().unwrap_or_default())
            .arg(2)
            .arg(&self.stock_key)
            .arg(&self.leases_key)
            .arg(&link.token)
            .arg(op.seq)
            .arg(kind)
            .arg(op.amount);
        // Only a lost take can oversell: it alone waits for the fsync.
        let wait = link.waitaof && matches!(op.kind, Kind::Take);
        if wait {
            // At least 1 ms: WAITAOF's 0 means "block for ever".
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            pipe.cmd("WAITAOF").arg(1).arg(0).arg(ms.max(1));
        }
        // Relaxed: a reporting tally.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let conn = link.conn.as_mut().expect("connected above");
        let values: Vec<Value> = match pipe.query(conn) {
            Ok(v) => v,
            Err(e) if answered(&e) => return Err(link.failed(&e, &self.stock_key)),
            Err(e) => {
                link.closed = reused && e.is_connection_dropped() && !e.is_timeout();
                return Err(fail(link, e.to_string()));
            }
        };
        if wait {
            let fsynced = match values.get(1) {
                Some(Value::Array(a)) => matches!(a.first(), Some(Value::Int(n)) if *n >= 1),
                _ => false,
            };
            if !fsynced {
                return Err(fail(link, "WAITAOF: the take is not on disk yet".into()));
            }
        }
        let ints: Option<Vec<i64>> = match values.first() {
            Some(Value::Array(items)) => items
                .iter()
                .map(|x| match x {
                    Value::Int(i) => Some(*i),
                    _ => None,
                })
                .collect(),
            Some(Value::ServerError(e)) => {
                if e.code() == "NOSCRIPT" {
                    link.sha = None;
                }
                return Err(FleetError::Redis(format!("{e:?}")));
            }
            _ => None,
        };
        match ints.as_deref() {
            // A grant is never negative nor 2^53 or more (the script's
            // bound); anything else came from a record edited by hand.
            Some([0 | 1, amount, ..]) if !(0..MAX_AMOUNT as i64).contains(amount) => {
                Err(FleetError::Corrupt(format!(
                    "{}: this token's record holds an amount out of range: {amount}",
                    self.leases_key
                )))
            }
            Some([code @ (0 | 1), amount, stock, lost]) => {
                if *code == 1 && *lost > 0 {
                    // Relaxed: a reporting tally.
                    self.lost_ops.fetch_add(*lost as u64, Ordering::Relaxed);
                }
                Ok(Reply {
                    amount: *amount as u64,
                    stock: *stock,
                })
            }
            Some([-2, last]) => Err(FleetError::Corrupt(format!(
                "{}: this token's record is at operation {last}, past {}: \
                 another writer changed it; nothing was applied",
                self.leases_key, op.seq
            ))),
            Some([-3, stock]) => Err(FleetError::Invalid(format!(
                "adding {} to {} would take the stock to 2^53 or more",
                op.amount, stock
            ))),
            Some([-1]) => Err(FleetError::Corrupt(format!(
                "{} or {} does not hold a stock's layout",
                self.stock_key, self.leases_key
            ))),
            _ => Err(fail(link, format!("unexpected script reply {values:?}"))),
        }
    }

    /// The idle worker's pass: returns a lease unchanged for `idle`.
    fn idle_pass(&self) {
        let Some(mut link) = try_lock(&self.link) else {
            return; // a refill is running: not idle
        };
        let now = Instant::now();
        let lease = self.local.sum();
        if lease != link.idle_seen.0 || lease == 0 && link.unresolved.is_none() {
            link.idle_seen = (lease, now);
            return;
        }
        if now.duration_since(link.idle_seen.1) >= self.config.idle {
            // An error keeps the return unresolved; the next pass or call
            // resends it.
            let _ = self.give_back(&mut link);
            link.idle_seen = (self.local.sum(), Instant::now());
        }
    }
}

impl Link {
    /// The error for a failed call on `key`: `Corrupt` when Redis answered
    /// that the key holds another type, `Redis` otherwise. The connection
    /// is kept when Redis answered (it is in step), dropped when not.
    fn failed(&mut self, e: &redis::RedisError, key: &str) -> FleetError {
        if !answered(e) {
            self.conn = None;
        }
        if e.code() == Some("WRONGTYPE") {
            FleetError::Corrupt(format!("{key} holds another type than the stock's: {e}"))
        } else {
            FleetError::Redis(e.to_string())
        }
    }

    /// One idempotent command; resent once on a fresh connection if the
    /// reused one was found closed (a Redis restart).
    fn query<T: redis::FromRedisValue>(
        &mut self,
        timeout: Duration,
        cmd: &redis::Cmd,
    ) -> Result<T, redis::RedisError> {
        let reused = self.conn.is_some();
        match self.connect(timeout).and_then(|conn| cmd.query(conn)) {
            Err(e) if reused && e.is_connection_dropped() && !e.is_timeout() => {
                self.conn = None;
                self.connect(timeout).and_then(|conn| cmd.query(conn))
            }
            r => r,
        }
    }

    fn connect(&mut self, timeout: Duration) -> Result<&mut Connection, redis::RedisError> {
        if self.conn.is_none() {
            let mut conn = self.client.get_connection_with_timeout(timeout)?;
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            let info: String = redis::cmd("INFO")
                .arg("server")
                .arg("persistence")
                .query(&mut conn)?;
            self.waitaof = has_waitaof(&info);
            self.conn = Some(conn);
            self.sha = None;
        }
        let conn = self.conn.as_mut().expect("connected above");
        if self.sha.is_none() {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(LEASE_SCRIPT)
                .query(conn)?;
            self.sha = Some(sha);
        }
        Ok(conn)
    }
}

/// Whether an `INFO server persistence` reply shows Redis 7.2 or later
/// with the AOF on (WAITAOF can then confirm a take is on disk).
fn has_waitaof(info: &str) -> bool {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let version = field("redis_version").unwrap_or("0");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 2) && field("aof_enabled") == Some("1")
}

/// Panics (as documented) on an amount the script cannot count exactly.
fn assert_amount(n: u64, call: &str) {
    assert!(
        n < MAX_AMOUNT,
        "shardcount: FleetStock::{call}({n}): the amount must be below 2^53"
    );
}

/// Takes everything out of `local`; returns how much.
fn drain(local: &Stock) -> u64 {
    loop {
        let units = local.sum();
        if units == 0 || local.try_sub(units).is_ok() {
            return units;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitaof_needs_7_2_and_aof() {
        let info = |v: &str, aof: u8| {
            format!("# Server\r\nredis_version:{v}\r\n# Persistence\r\naof_enabled:{aof}\r\n")
        };
        assert!(!has_waitaof(&info("7.0.15", 1)));
        assert!(has_waitaof(&info("7.2.4", 1)));
        assert!(has_waitaof(&info("8.0.0", 1)));
        assert!(!has_waitaof(&info("7.2.4", 0)));
        assert!(!has_waitaof(""));
    }

    #[test]
    fn drain_empties_the_lease() {
        let s = Stock::new(37);
        assert_eq!(drain(&s), 37);
        assert_eq!(s.sum(), 0);
        assert_eq!(drain(&s), 0);
    }
}
