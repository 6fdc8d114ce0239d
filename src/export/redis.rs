//! `RedisSink` (feature `redis`): batches folded into Redis keys exactly
//! once, by a Lua script.
//!
//! # The script's contract
//!
//! `KEYS[1]` is the writers hash (`<prefix>__writers`), `KEYS[2..]` the
//! counters' keys (`<prefix><key>`); `ARGV[1]` is the writer id, `ARGV[2]`
//! the batch number, `ARGV[3..]` the deltas, one per counter key, in order.
//! In one atomic script run it
//!
//! 1. checks that the writers hash is a hash (or absent) and that this
//!    writer's field in it is a number, else returns `{4}` and changes
//!    nothing (the sink reports a delivery error naming the key; the
//!    exporter keeps the batch and retries with back-off); reads
//!    `last = HGET writers <writer>` (0 when absent);
//! 2. if `seq <= last` returns `{0, last}` (duplicate: nothing changed);
//!    if `seq > last + 1` returns `{2, last}` (gap: nothing changed);
//! 3. validates every key before writing anything (scripts do not roll
//!    back), reading them with `MGET` (1,000 keys a call) (a key it reads as nil is
//!    checked with `EXISTS`: `MGET` reads other types as nil too): each
//!    must be absent or a string holding a decimal integer as `INCRBY`
//!    accepts it (`0`, or an optional `-` and digits without a leading
//!    zero: `007` and `-0` are refused here, not half-way through),
//!    and the sum with its delta must stay within ±9.2·10<sup>18</sup> (a
//!    margin below the 64-bit limit that Lua's doubles can check). A
//!    counter key equal to the writers hash's key is refused too, and so
//!    is a key repeated in one batch (each check reads the value stored
//!    before the batch; the exporter never repeats a key). If any
//!    fails it returns `{3, i, ...}` with their 1-based positions among the
//!    counter keys, changing nothing;
//! 4. runs `INCRBY` on each key, `HSET writers <writer> <seq>`, and returns
//!    `{1}`.
//!
//! The script is loaded once per connection with `SCRIPT LOAD` and run
//! with `EVALSHA`; a `NOSCRIPT` answer (a restarted or flushed server)
//! loads it again and resends. Several batches go in one pipeline; a
//! batch that follows a non-applied one in the same pipeline sees a gap and
//! is resent (the exporter only acts on the first batch that was not
//! applied).
//!
//! # What Redis keeps
//!
//! Redis runs a script's writes as one transaction, in memory, in the AOF
//! and to replicas. With `appendonly yes` it normally writes the AOF before
//! it replies, so a Redis process killed with `kill -9` keeps what it
//! confirmed. Not always under `appendfsync everysec`: while a background
//! fsync is slow, Redis postpones the AOF write for up to 2 s but still
//! replies, and a `kill -9` then loses those confirmed writes (seen in
//! this crate's tests on a busy host); a machine crash loses up to the last
//! second or two too. The next batch then sees a gap, and the exporter sends
//! the lost batches again from those it retained (`ExportConfig::retain`,
//! 3 s, not counting time while deliveries fail: a restart of any length
//! while counts keep coming) under a new writer id, so the totals stay
//! exact.
//! Losses older than that (no persistence, a failover to a lagging
//! replica) are counted in `ExportStats::lost` and missing from Redis.
//!
//! # Keys, and others writing under the prefix
//!
//! Counter `k` lives at `<prefix>k`; the sink's own bookkeeping at
//! `<prefix>__writers`. Keys starting with `__` are reserved: the
//! [`Exporter`](super::exporter::Exporter) refuses them (see
//! [`RESERVED_PREFIX`](super::source::RESERVED_PREFIX)), and the script
//! refuses a counter key equal to the writers hash's, so a counter can
//! never name it.
//!
//! Everything a batch touches is checked before the first write, so a
//! batch applies entirely or not at all, whatever is stored at its keys.
//! If another program writes under the prefix:
//!
//! * a counter key it sets to a non-integer, another type or a value near
//!   the 64-bit limit makes that key's deltas rejected
//!   ([`ExportStats::rejected`](super::exporter::ExportStats::rejected));
//!   the other keys of the batch still apply, once;
//! * an integer it adds to a counter key is simply part of that key's total
//!   (the exporter only ever adds deltas);
//! * a writers hash it replaces by another type, or a writer's field it
//!   sets to anything but digits (a negative number, `inf`, hex), stops
//!   every batch of the prefix, which waits
//!   (nothing written, the error in
//!   [`ExportStats::last_error`](super::exporter::ExportStats::last_error))
//!   until the key is repaired. Only restoring each writer's number repairs
//!   it exactly. Deleting the key, or lowering or deleting a field, looks like
//!   a server that lost confirmed batches (a gap, see the
//!   [exporter's docs](super#the-sinks-contract)): the exporter sends again
//!   the batches it confirmed within
//!   [`ExportConfig::retain`](super::exporter::ExportConfig::retain), which the
//!   counter keys already hold, so those are counted twice. (No sink can
//!   keep exactly-once against a writer that erases its bookkeeping.)
//!
//! The writers hash gains one field per exporter start (a writer id and a
//! number, about 50 bytes). Every key of a batch must live in one slot: on
//! a Redis Cluster, give the prefix a hash tag (`{fleet}:`; one master
//! takes every key), or spread the keys over every master with
//! [`RedisClusterSink`](super::redis_cluster::RedisClusterSink) (feature
//! `redis-cluster`).

use super::sink::{Batch, Outcome, Sink, SinkError};
use redis::{Client, Connection, Value};
use std::fmt;
use std::time::Duration;

/// The Lua script (see the module docs for its contract).
pub const SCRIPT: &str = include_str!("scripts/fold.lua");

/// A [`Sink`] that folds batches into Redis keys `<prefix><key>` exactly
/// once (see the module docs). Connects lazily, on the first delivery, and
/// again after any error; never blocks longer than its timeout per
/// network step.
///
/// ```no_run
/// use shardcount::export::redis::RedisSink;
/// use shardcount::export::Exporter;
/// use shardcount::RoughCounter;
/// use std::time::{Duration, Instant};
///
/// static REQUESTS: RoughCounter = RoughCounter::new();
/// let sink = RedisSink::new("redis://127.0.0.1:6379", "fleet:").unwrap();
/// let exporter = Exporter::new(sink, Duration::from_millis(100));
/// exporter.register("requests", &REQUESTS); // Redis key "fleet:requests"
/// REQUESTS.inc();
/// // at shutdown:
/// if let Err(e) = exporter.flush(Instant::now() + Duration::from_secs(5)) {
///     eprintln!("{e}"); // what could not be delivered
///     if let Some(why) = std::error::Error::source(&e) {
///         eprintln!("last delivery error: {why}");
///     }
/// }
/// ```
pub struct RedisSink {
    client: Client,
    conn: Option<Connection>,
    sha: Option<String>,
    prefix: String,
    writers_key: String,
    timeout: Duration,
}

impl RedisSink {
    /// A sink for the server at `url` (`redis://host:port[/db]`), writing
    /// keys under `prefix`. Does not connect yet.
    ///
    /// # Errors
    ///
    /// [`RedisSinkError`] if `url` cannot be parsed.
    ///
    /// ```
    /// let sink = shardcount::export::redis::RedisSink::new("redis://127.0.0.1:1", "app:").unwrap();
    /// assert_eq!(sink.writers_key(), "app:__writers");
    /// ```
    pub fn new(url: &str, prefix: &str) -> Result<RedisSink, RedisSinkError> {
        Ok(RedisSink {
            client: Client::open(url).map_err(RedisSinkError)?,
            conn: None,
            sha: None,
            prefix: prefix.to_owned(),
            writers_key: format!("{prefix}__writers"),
            timeout: Duration::from_secs(2),
        })
    }

    /// Sets the connect, read and write timeout (default 2 s).
    ///
    /// # Panics
    ///
    /// If `timeout` is zero (std refuses a zero socket timeout: every
    /// delivery would fail).
    ///
    /// ```
    /// use std::time::Duration;
    /// let sink = shardcount::export::redis::RedisSink::new("redis://127.0.0.1:1", "")
    ///     .unwrap()
    ///     .with_timeout(Duration::from_millis(500));
    /// # drop(sink);
    /// ```
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> RedisSink {
        assert!(
            !timeout.is_zero(),
            "shardcount: RedisSink::with_timeout: the timeout must not be zero"
        );
        self.timeout = timeout;
        self
    }

    /// The hash holding each writer's last applied batch number.
    ///
    /// ```
    /// let s = shardcount::export::redis::RedisSink::new("redis://127.0.0.1:1", "x:").unwrap();
    /// assert_eq!(s.writers_key(), "x:__writers");
    /// ```
    #[must_use]
    pub fn writers_key(&self) -> &str {
        &self.writers_key
    }

    fn connect(&mut self) -> Result<&mut Connection, redis::RedisError> {
        if self.conn.is_none() {
            let conn = self.client.get_connection_with_timeout(self.timeout)?;
            conn.set_read_timeout(Some(self.timeout))?;
            conn.set_write_timeout(Some(self.timeout))?;
            self.conn = Some(conn);
            self.sha = None;
        }
        let conn = self.conn.as_mut().expect("connected above");
        if self.sha.is_none() {
            let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(SCRIPT).query(conn)?;
            self.sha = Some(sha);
        }
        Ok(conn)
    }

    /// Sends each batch's script call as soon as it is encoded, then reads
    /// the replies: Redis runs the first batch while the next ones are
    /// still being encoded, so client and server work overlap instead of
    /// taking turns. (Replies are a few bytes each and Redis buffers them,
    /// so sending everything before reading cannot block on either side.)
    fn try_deliver(&mut self, batches: &[Batch]) -> Result<Vec<Value>, redis::RedisError> {
        let sha = self.sha.clone().unwrap_or_default();
        let conn = self.conn.as_mut().expect("connected by the caller");
        // One buffer for every key: `arg` copies the bytes, so no
        // allocation per key.
        let mut key = String::with_capacity(self.prefix.len() + 32);
        for b in batches {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&sha).arg(b.deltas().len() + 1);
            cmd.arg(&self.writers_key);
            for (k, _) in b.deltas() {
                key.clear();
                key.push_str(&self.prefix);
                key.push_str(k);
                cmd.arg(key.as_str());
            }
            cmd.arg(b.writer().to_string()).arg(b.seq());
            for (_, d) in b.deltas() {
                cmd.arg(*d);
            }
            conn.send_packed_command(&cmd.get_packed_command())?;
        }
        // A server error (NOSCRIPT, a failed script) is a value here, one
        // per batch; `outcome` reads it. Push frames (RESP3 out-of-band
        // messages) are not replies: skipped, as the crate's own pipeline
        // does.
        batches
            .iter()
            .map(|_| loop {
                match conn.recv_response()? {
                    Value::Push { .. } => continue,
                    reply => return Ok(reply),
                }
            })
            .collect()
    }

    fn deliver_once(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        if let Err(e) = self.connect() {
            return Err(self.fail(e));
        }
        let values = self.try_deliver(batches).map_err(|e| self.fail(e))?;
        if values.len() != batches.len() {
            self.conn = None;
            return Err(SinkError::new(format!(
                "redis: {} replies to {} batches",
                values.len(),
                batches.len()
            )));
        }
        let mut out = Vec::with_capacity(batches.len());
        for (b, v) in batches.iter().zip(values) {
            out.push(self.outcome(b, v)?);
        }
        Ok(out)
    }

    /// Forgets the connection after an error, so the next delivery
    /// reconnects (and reloads the script).
    fn fail(&mut self, e: redis::RedisError) -> SinkError {
        if !answered(&e) {
            self.conn = None;
        }
        SinkError::new(e)
    }

    fn outcome(&mut self, b: &Batch, v: Value) -> Result<Outcome, SinkError> {
        let ints = |v: &[Value]| -> Option<Vec<i64>> {
            v.iter()
                .map(|x| match x {
                    Value::Int(i) => Some(*i),
                    _ => None,
                })
                .collect()
        };
        match v {
            Value::Array(items) => match ints(&items).as_deref() {
                Some([1]) => Ok(Outcome::Applied),
                Some([0, _]) => Ok(Outcome::Duplicate),
                Some([2, last]) => match u64::try_from(*last) {
                    Ok(last) => Ok(Outcome::Gap { last }),
                    Err(_) => Err(SinkError::new(format!(
                        "redis: {} records batch {last} for this writer, below 0: \
                         nothing was written; batches wait until it is repaired",
                        self.writers_key
                    ))),
                },
                Some([4]) => Err(SinkError::new(format!(
                    "redis: {} is not a hash of writers' batch numbers (or this writer's \
                     field there is not a number of digits): nothing was written; batches \
                     wait until it is repaired",
                    self.writers_key
                ))),
                Some([3, bad @ ..]) => Ok(Outcome::Rejected {
                    keys: bad
                        .iter()
                        .filter_map(|&i| b.deltas().get((i as usize).checked_sub(1)?))
                        .map(|(k, _)| k.clone())
                        .collect(),
                }),
                _ => Err(SinkError::new(format!(
                    "redis: unexpected script reply {items:?}"
                ))),
            },
            Value::ServerError(e) => {
                if e.code() == "NOSCRIPT" {
                    self.sha = None;
                }
                Err(SinkError::new(format!("redis: {e:?}")))
            }
            other => Err(SinkError::new(format!(
                "redis: unexpected script reply {other:?}"
            ))),
        }
    }
}

impl Sink for RedisSink {
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        match self.deliver_once(batches) {
            // NOSCRIPT (the script cache was flushed): loaded again by
            // `connect`; resending is safe, applied batches are duplicates.
            Err(_) if self.sha.is_none() && self.conn.is_some() => self.deliver_once(batches),
            r => r,
        }
    }
}

/// Why [`RedisSink::new`] refused its URL. The `redis` crate's error is its
/// [`source`](std::error::Error::source), so this crate's API does not depend on that
/// crate's version.
///
/// ```
/// use shardcount::export::redis::RedisSink;
/// use std::error::Error;
///
/// let e = RedisSink::new("not a url", "app:").unwrap_err();
/// assert_eq!(e.to_string(), "RedisSink: the Redis URL was refused");
/// let cause = e.source().expect("the redis error");
/// assert!(!cause.to_string().is_empty());
/// ```
#[derive(Debug)]
pub struct RedisSinkError(redis::RedisError);

impl fmt::Display for RedisSinkError {
    /// A fixed message: the URL may hold a password, and the cause is the
    /// [`source`](std::error::Error::source).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedisSink: the Redis URL was refused")
    }
}

impl std::error::Error for RedisSinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSink")
            .field("prefix", &self.prefix)
            .field("connected", &self.conn.is_some())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Whether Redis answered with an error reply, which leaves the connection
/// in step (as opposed to a lost connection, a timeout or an unreadable
/// reply, after which a late reply could still arrive on it).
pub(crate) fn answered(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}
