//! `RedisClusterSink`: the fold script of `RedisSink`, per bucket, over a
//! Redis Cluster.

use super::buckets::{BucketLog, Sub};
use super::connect::{connect, Cluster};
use super::keys::ClusterKeys;
use crate::export::redis::{answered, SCRIPT};
use crate::export::sink::{Batch, Outcome, Sink, SinkError};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Cmd, FromRedisValue as _, Value};
use std::fmt;
use std::time::{Duration, Instant};

/// When a delivery counts as done (see the [module docs](super#failover)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// When every master ran the batch's scripts. A master that dies
    /// before its replica received them loses them; the sink finds the gap
    /// on its next delivery and sends them again from what it retains.
    Master,
    /// When, after the scripts, `WAIT replicas timeout` on every master
    /// answered at least `replicas`: a failover to any of those replicas
    /// keeps the batch. A master with fewer live replicas stops
    /// deliveries until it has them again (each attempt waits up to
    /// `timeout`).
    Replicas {
        /// Replicas per master that must hold the batch.
        replicas: u32,
        /// How long each master may wait for them.
        timeout: Duration,
    },
}

/// A [`Sink`] that folds batches into a Redis Cluster exactly once, each
/// counter in its bucket's slot (see the [module docs](super)). Connects
/// lazily and again after any connection error (a new client seeded with
/// every address given, so it learns a failover's new topology).
///
/// ```no_run
/// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
/// use shardcount::export::Exporter;
/// use shardcount::RoughCounter;
/// use std::time::Duration;
///
/// static REQUESTS: RoughCounter = RoughCounter::new();
/// let keys = ClusterKeys::new("fleet:", 16);
/// let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000", "redis://10.0.0.3:7000"];
/// let sink = RedisClusterSink::new(&nodes, keys.clone()).unwrap();
/// let exporter = Exporter::new(sink, Duration::from_millis(100));
/// exporter.register("requests", &REQUESTS);
/// REQUESTS.inc();
/// // The fleet's total is at keys.key("requests").
/// ```
pub struct RedisClusterSink {
    nodes: Vec<String>,
    timeout: Duration,
    conn: Option<Cluster>,
    sha: Option<String>,
    keys: ClusterKeys,
    writers_keys: Vec<String>,
    logs: Vec<BucketLog>,
    durability: Durability,
    retain: Duration,
    repairs: Repairs,
    /// Since when deliveries have failed: that time ages no retained part.
    failing_since: Option<Instant>,
}

/// A [`RedisClusterSink`]'s failover repairs, readable after the sink was
/// handed to an [`Exporter`](crate::export::Exporter): take it with
/// [`RedisClusterSink::repairs`] first. Clones share the counts.
///
/// ```
/// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
/// use shardcount::export::Exporter;
/// use std::time::Duration;
///
/// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("", 4)).unwrap();
/// let repairs = sink.repairs();
/// let exporter = Exporter::new(sink, Duration::from_secs(1));
/// assert_eq!((repairs.resent(), repairs.lost()), (0, 0));
/// # drop(exporter);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Repairs(std::sync::Arc<[std::sync::atomic::AtomicU64; 2]>);

impl Repairs {
    /// Confirmed batch parts that a failover lost and the sink sent again
    /// from what it retains (the totals stayed exact). Each is one
    /// bucket's part of one batch.
    ///
    /// ```
    /// # use shardcount::export::redis_cluster::Repairs;
    /// assert_eq!(Repairs::default().resent(), 0);
    /// ```
    #[must_use]
    pub fn resent(&self) -> u64 {
        // Relaxed: a tally, read for reporting.
        self.0[0].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Confirmed batch parts that a failover lost before they could be
    /// sent again (older than [`RedisClusterSink::with_retain`]): their
    /// counts are missing from the cluster.
    ///
    /// ```
    /// # use shardcount::export::redis_cluster::Repairs;
    /// assert_eq!(Repairs::default().lost(), 0);
    /// ```
    #[must_use]
    pub fn lost(&self) -> u64 {
        // Relaxed: as `resent`.
        self.0[1].load(std::sync::atomic::Ordering::Relaxed)
    }

    fn add(&self, resent: u64, lost: u64) {
        // Relaxed: as `resent`.
        self.0[0].fetch_add(resent, std::sync::atomic::Ordering::Relaxed);
        self.0[1].fetch_add(lost, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Why [`RedisClusterSink::new`] refused its node addresses. The `redis`
/// crate's error is its [`source`](std::error::Error::source).
///
/// ```
/// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
///
/// let e = RedisClusterSink::new(&["not a url"], ClusterKeys::new("", 4)).unwrap_err();
/// assert_eq!(e.to_string(), "RedisClusterSink: a node address was refused");
/// ```
#[derive(Debug)]
pub struct RedisClusterSinkError(redis::RedisError);

impl fmt::Display for RedisClusterSinkError {
    /// A fixed message: an address may hold a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedisClusterSink: a node address was refused")
    }
}

impl std::error::Error for RedisClusterSinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The timeout a new sink starts with.
const TIMEOUT: Duration = Duration::from_secs(2);

impl RedisClusterSink {
    /// A sink for the cluster reachable at any of `nodes`
    /// (`redis://host:port`; give every master's and replica's address, or
    /// several: after a failover the sink reconnects through whichever
    /// answers), writing keys where `keys` puts them. Does not connect yet.
    ///
    /// # Errors
    ///
    /// [`RedisClusterSinkError`] if an address cannot be parsed or none is
    /// given.
    ///
    /// ```
    /// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    /// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("app:", 8)).unwrap();
    /// assert_eq!(sink.keys().buckets(), 8);
    /// ```
    pub fn new<S: AsRef<str>>(
        nodes: &[S],
        keys: ClusterKeys,
    ) -> Result<RedisClusterSink, RedisClusterSinkError> {
        let nodes: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        // Parse now, so a bad address fails here and not at each delivery.
        ClusterClientBuilder::new(nodes.clone())
            .build()
            .map_err(RedisClusterSinkError)?;
        let buckets = keys.buckets();
        Ok(RedisClusterSink {
            nodes,
            timeout: TIMEOUT,
            conn: None,
            sha: None,
            writers_keys: (0..buckets).map(|b| keys.writers_key(b)).collect(),
            logs: (0..buckets).map(|_| BucketLog::default()).collect(),
            keys,
            durability: Durability::Master,
            retain: Duration::from_secs(10),
            repairs: Repairs::default(),
            failing_since: None,
        })
    }

    /// Sets the connect and response timeout per node (default 2 s).
    ///
    /// # Panics
    ///
    /// If `timeout` is zero.
    ///
    /// ```
    /// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    /// use std::time::Duration;
    /// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("", 4))
    ///     .unwrap()
    ///     .with_timeout(Duration::from_millis(500));
    /// # drop(sink);
    /// ```
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> RedisClusterSink {
        assert!(
            !timeout.is_zero(),
            "shardcount: RedisClusterSink::with_timeout: the timeout must not be zero"
        );
        self.timeout = timeout;
        self.conn = None;
        self
    }

    /// Sets when a delivery counts as done (default [`Durability::Master`]).
    ///
    /// # Panics
    ///
    /// If [`Durability::Replicas`] asks for no replica or a zero timeout.
    ///
    /// ```
    /// use shardcount::export::redis_cluster::{ClusterKeys, Durability, RedisClusterSink};
    /// use std::time::Duration;
    /// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("", 4))
    ///     .unwrap()
    ///     .with_durability(Durability::Replicas { replicas: 1, timeout: Duration::from_millis(100) });
    /// # drop(sink);
    /// ```
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> RedisClusterSink {
        if let Durability::Replicas { replicas, timeout } = durability {
            assert!(
                replicas > 0 && !timeout.is_zero(),
                "shardcount: RedisClusterSink::with_durability: Replicas needs at least one replica and a timeout above zero"
            );
        }
        self.durability = durability;
        self
    }

    /// Sets how long each bucket keeps the batches it confirmed, to send
    /// them again if a failover loses them (default 10 s). Time while
    /// deliveries fail (a master down until its replica is promoted, at
    /// least `cluster-node-timeout`) does not count, so a failover under
    /// steady exports is repaired however long it takes; with no export
    /// meanwhile (nothing to deliver, so nothing fails), the wait counts,
    /// so set it above your failovers' length if folds may pause that
    /// long.
    ///
    /// ```
    /// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    /// use std::time::Duration;
    /// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("", 4))
    ///     .unwrap()
    ///     .with_retain(Duration::from_secs(30));
    /// # drop(sink);
    /// ```
    #[must_use]
    pub fn with_retain(mut self, retain: Duration) -> RedisClusterSink {
        self.retain = retain;
        self
    }

    /// Where this sink writes.
    ///
    /// ```
    /// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    /// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("a:", 4)).unwrap();
    /// assert_eq!(sink.keys().prefix(), "a:");
    /// ```
    #[must_use]
    pub fn keys(&self) -> &ClusterKeys {
        &self.keys
    }

    /// The sink's failover repairs: a handle that stays readable after the
    /// sink goes to an exporter (see [`Repairs`]).
    ///
    /// ```
    /// use shardcount::export::redis_cluster::{ClusterKeys, RedisClusterSink};
    /// let sink = RedisClusterSink::new(&["redis://127.0.0.1:1"], ClusterKeys::new("", 4)).unwrap();
    /// assert_eq!(sink.repairs().lost(), 0);
    /// ```
    #[must_use]
    pub fn repairs(&self) -> Repairs {
        self.repairs.clone()
    }

    fn connect(&mut self) -> Result<&mut Cluster, redis::RedisError> {
        if self.conn.is_none() {
            // The exporter retries with back-off (`connect`'s few retries).
            self.conn = Some(connect(&self.nodes, self.timeout)?);
            self.sha = None;
        }
        let conn = self.conn.as_mut().expect("connected above");
        if self.sha.is_none() {
            // Every master (a promoted replica has no script cache); one
            // that is down answers NOSCRIPT later, and it is loaded again.
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(SCRIPT);
            let all = RoutingInfo::MultiNode((
                MultipleNodeRoutingInfo::AllMasters,
                Some(ResponsePolicy::OneSucceeded),
            ));
            let sha = String::from_redis_value_ref(&conn.route_command(&load, all)?)?;
            self.sha = Some(sha);
        }
        Ok(conn)
    }

    /// Forgets the connection after an error Redis did not answer with, so
    /// the next delivery builds a new client (the sync cluster client does
    /// not drop a dead master's address on its own).
    fn fail(&mut self, e: redis::RedisError) -> SinkError {
        if !answered(&e) {
            self.conn = None;
        } else if e.code() == Some("NOSCRIPT") {
            self.sha = None;
        }
        SinkError::new(format!("redis cluster: {e}"))
    }

    /// The script call for `sub` of bucket `b`.
    fn command(&self, b: usize, sub: &Sub) -> Cmd {
        let log = &self.logs[b];
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.sha.as_deref().unwrap_or_default())
            .arg(sub.deltas.len() + 1)
            .arg(&self.writers_keys[b]);
        let mut key = String::new();
        for (k, _) in &sub.deltas {
            key.clear();
            self.keys.push_key(&mut key, b, k);
            cmd.arg(key.as_str());
        }
        cmd.arg(log.writer_field()).arg(sub.seq);
        for (_, d) in &sub.deltas {
            cmd.arg(*d);
        }
        cmd
    }

    /// Sends every command, all nodes' at once (the cluster pipeline
    /// writes to each master before reading any reply); if any reply is
    /// an error (a redirect during a slot migration, a script cache
    /// emptied by a failover), sends each again on its own, which follows
    /// `MOVED` and `ASK`. Resending is safe: the script applies a batch
    /// number once.
    fn send(&mut self, cmds: &[Cmd]) -> Result<Vec<Value>, redis::RedisError> {
        let conn = self.conn.as_mut().expect("connected by the caller");
        let mut pipe = redis::cluster::cluster_pipe();
        for c in cmds {
            pipe.add_command(c.clone());
        }
        match pipe.query::<Vec<Value>>(conn) {
            Ok(values) => Ok(values),
            Err(e) if e.clone().into_server_errors().is_some() => cmds
                .iter()
                .map(|c| redis::ConnectionLike::req_command(conn, c))
                .collect(),
            Err(e) => Err(e),
        }
    }

    /// Waits until every master's replicas hold what this connection wrote,
    /// if the durability asks for that.
    fn wait_replicas(&mut self) -> Result<(), SinkError> {
        let Durability::Replicas { replicas, timeout } = self.durability else {
            return Ok(());
        };
        let conn = self.conn.as_mut().expect("connected by the caller");
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = conn.route_command(&wait, all).map_err(|e| self.fail(e))?;
        let Value::Map(per_node) = reply else {
            return Err(SinkError::new(format!(
                "redis cluster: unexpected WAIT reply {reply:?}"
            )));
        };
        for (node, acked) in per_node {
            match acked {
                Value::Int(n) if n >= i64::from(replicas) => {}
                other => {
                    return Err(SinkError::new(format!(
                        "redis cluster: {} replicas of {replicas} acknowledged on {node:?}; \
                         the batches are applied there but not yet durable",
                        match other {
                            Value::Int(n) => n.to_string(),
                            v => format!("{v:?}"),
                        }
                    )))
                }
            }
        }
        Ok(())
    }

    fn deliver_once(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        let now = Instant::now();
        let writer = batches[0].writer();
        // While deliveries fail, parts age only up to the first failure:
        // the delivery that finds a failover's gap is the first to succeed.
        let aged_to = self.failing_since.unwrap_or(now);
        for log in &mut self.logs {
            log.start(writer, aged_to, self.retain);
        }
        if let Err(e) = self.connect() {
            return Err(self.fail(e));
        }
        // Every bucket gets every batch, empty parts too: a bucket's
        // numbers follow the exporter's, so the script's gap test holds
        // per bucket. Parts a bucket confirmed before are not sent again.
        let mut sent: Vec<(usize, Sub)> = Vec::new();
        for b in 0..self.logs.len() {
            for sub in self.logs[b].resend.clone() {
                sent.push((b, sub));
            }
            for batch in batches {
                if let Some(seq) = self.logs[b].seq_of(batch.seq()) {
                    let deltas = batch
                        .deltas()
                        .iter()
                        .filter(|(k, _)| self.keys.bucket_of(k) == b)
                        .cloned()
                        .collect();
                    sent.push((
                        b,
                        Sub {
                            seq,
                            batch: batch.seq(),
                            at: now,
                            deltas,
                        },
                    ));
                }
            }
        }
        let cmds: Vec<Cmd> = sent.iter().map(|(b, sub)| self.command(*b, sub)).collect();
        let values = self.send(&cmds).map_err(|e| self.fail(e))?;
        if values.len() != cmds.len() {
            self.conn = None;
            return Err(SinkError::new(format!(
                "redis cluster: {} replies to {} scripts",
                values.len(),
                cmds.len()
            )));
        }
        let mut replies = Vec::with_capacity(values.len());
        for v in values {
            replies.push(self.reply(v)?);
        }
        self.wait_replicas()?;
        // Each bucket's parts in order, until the first not applied.
        let mut rejected: Vec<(u64, Vec<String>)> = Vec::new();
        let mut stopped = vec![false; self.logs.len()];
        for ((b, sub), reply) in sent.into_iter().zip(replies) {
            if stopped[b] {
                continue;
            }
            match reply {
                Reply::Done => self.logs[b].confirm(sub),
                Reply::Gap { last } => {
                    stopped[b] = true;
                    let (resent, lost) = self.logs[b].recover(last);
                    self.repairs.add(resent, lost);
                }
                Reply::Rejected(positions) => {
                    stopped[b] = true;
                    let keys = positions
                        .iter()
                        .filter_map(|&i| sub.deltas.get(i.checked_sub(1)?))
                        .map(|(k, _)| k.clone())
                        .collect();
                    rejected.push((self.logs[b].batch_of(sub.seq), keys));
                }
            }
        }
        let mut outcomes = Vec::new();
        for batch in batches {
            let seq = batch.seq();
            let mut keys: Vec<String> = rejected
                .iter()
                .filter(|(s, _)| *s == seq)
                .flat_map(|(_, k)| k.iter().cloned())
                .collect();
            if !keys.is_empty() {
                keys.sort_unstable();
                keys.dedup();
                outcomes.push(Outcome::Rejected { keys });
                break;
            }
            if !self.logs.iter().all(|log| log.has(seq)) {
                break;
            }
            outcomes.push(Outcome::Applied);
        }
        if outcomes.is_empty() {
            return Err(SinkError::new(
                "redis cluster: a bucket lost confirmed batches in a failover; \
                 they are sent again on the next delivery",
            ));
        }
        Ok(outcomes)
    }

    /// Reads one script reply.
    fn reply(&mut self, v: Value) -> Result<Reply, SinkError> {
        let ints: Option<Vec<i64>> = match &v {
            Value::Array(items) => items
                .iter()
                .map(|x| match x {
                    Value::Int(i) => Some(*i),
                    _ => None,
                })
                .collect(),
            _ => None,
        };
        match ints.as_deref() {
            Some([1] | [0, _]) => Ok(Reply::Done),
            Some([2, last]) if *last >= 0 => Ok(Reply::Gap { last: *last as u64 }),
            Some([3, bad @ ..]) => Ok(Reply::Rejected(
                bad.iter().map(|&i| i.max(0) as usize).collect(),
            )),
            Some([4] | [2, _]) => Err(SinkError::new(
                "redis cluster: a bucket's writers hash is not a hash of batch numbers (or \
                 this writer's field there is not a number of digits): nothing was written \
                 there; batches wait until it is repaired",
            )),
            _ => {
                if let Value::ServerError(e) = &v {
                    if e.code() == "NOSCRIPT" {
                        self.sha = None;
                    }
                }
                Err(SinkError::new(format!(
                    "redis cluster: unexpected script reply {v:?}"
                )))
            }
        }
    }
}

/// What one bucket's script said.
enum Reply {
    Done,
    Gap { last: u64 },
    Rejected(Vec<usize>),
}

impl Sink for RedisClusterSink {
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        if batches.is_empty() {
            return Ok(Vec::new());
        }
        let delivered = self.deliver_once(batches);
        match (&delivered, self.failing_since) {
            (Err(_), None) => self.failing_since = Some(Instant::now()),
            (Ok(_), Some(since)) => {
                let outage = Instant::now().saturating_duration_since(since);
                for log in &mut self.logs {
                    log.postpone(outage);
                }
                self.failing_since = None;
            }
            _ => {}
        }
        delivered
    }
}

impl fmt::Debug for RedisClusterSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClusterSink")
            .field("keys", &self.keys)
            .field("connected", &self.conn.is_some())
            .field("durability", &self.durability)
            .field("resent", &self.repairs.resent())
            .field("lost", &self.repairs.lost())
            .finish_non_exhaustive()
    }
}
