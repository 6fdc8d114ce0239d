//! Folds over a Redis Cluster (feature `redis-cluster`): every master
//! takes a share of a fleet's counters, and each share is folded exactly
//! once, as [`RedisSink`](super::redis::RedisSink) folds into one server.
//!
//! # Where counters live
//!
//! A script can only touch keys of one slot, and exactly-once needs the
//! writers record in the same script as the counts. So counters are
//! hashed into buckets ([`ClusterKeys`]), each bucket one hash tag, with
//! its own writers hash: exactly-once holds per bucket. The buckets' tags
//! are chosen to spread evenly over the slot space, so over masters that
//! own equal slot ranges. 16 buckets on 3 masters put 6, 5 and 5 buckets
//! on them; a multiple of the master count spreads evenly. Each bucket's
//! part of a batch is a script call of its own, about 5 µs of a master's
//! CPU: with batches of 1,000 keys, 16 buckets cost 1.35× one server's CPU
//! per key-delta (1.20× one server that feeds a replica, as each master
//! does), 3 buckets 1.21× and 48 buckets 1.44× (`docs/benchmarks.md`).
//!
//! # Delivery
//!
//! Each batch is cut into one part per bucket, empty parts included, so a
//! bucket's numbers follow the exporter's and its gap test stays exact.
//! Every part of every batch of a delivery goes in one cluster pipeline:
//! all masters' parts are written before any reply is read, so the masters
//! work at once. A bucket's parts are answered in order; the batch is
//! applied when every bucket applied its part. A rejected key rejects its
//! batch (the exporter drops the key and sends the batch again; buckets
//! that applied their part answer "duplicate"). A reply that is an error
//! (a `MOVED` or `ASK` during a slot migration, `TRYAGAIN`, a script cache
//! a failover emptied) makes the sink send each part again on its own,
//! through the cluster client's redirect handling.
//!
//! # Failover
//!
//! Redis replicates asynchronously: a master that dies may take with it
//! scripts it already answered, and the promoted replica holds the
//! bucket's counts and writers record as of some earlier part (the
//! script's writes replicate together). The next part to that bucket then
//! meets a gap, and the sink sends the lost parts again from those it
//! keeps ([`RedisClusterSink::with_retain`], 10 s by default), under
//! their numbers: the totals stay exact. Parts lost longer ago than that
//! are counted in [`Repairs::lost`], and the bucket goes on under
//! a new writer field (time while deliveries fail ages no part). That is
//! the default, [`Durability::Master`]: it costs nothing, and loses
//! nothing unless exports pause longer than the retain time across a
//! failover.
//!
//! Which to pick: the default keeps folds exact through a failover of any
//! length while exports go on (time while deliveries fail does not age
//! the retained parts), and through a pause in exports shorter than the
//! retain time; pick [`Durability::Replicas`] when exports may pause
//! longer than that across a failover, or when the process may also die
//! meanwhile (its retained parts die with it).
//!
//! [`Durability::Replicas`] confirms a delivery only once `WAIT` on every
//! master says its replicas hold it, so a failover loses no confirmed
//! batch however long it takes. It costs one `WAIT` round trip per master
//! per delivery, and stops deliveries while a master lacks a live replica
//! (after a failover, until the old master returns as a replica). Redis
//! 7.2's `WAITAOF` (the write on disk, not only in a replica's memory) is
//! not offered yet.
//!
//! # Timeouts
//!
//! Every path over a cluster (this sink, [`FleetStock::cluster`],
//! [`FleetReader::cluster`]) uses the `redis` crate's cluster client with
//! its timeout as the connect and response timeout and two retries. So one
//! call may take several times the timeout: a master that stops answering
//! costs each retry a timeout and a reconnect (a reviewer measured 1 to 17
//! s with a 300 ms timeout and a stopped master). And the client sends
//! `READONLY` on each new node connection with no timeout at all (redis
//! 1.2): a node that accepts a connection and then never answers blocks
//! that call until it answers or the connection fails. Keep the exporter's
//! thread, and any thread calling a cluster `FleetStock`, free to wait
//! that long.
//!
//! [`FleetStock::cluster`]: crate::fleet::FleetStock::cluster
//! [`FleetReader::cluster`]: crate::fleet::FleetReader::cluster
//!
//! # Reading the totals
//!
//! Counter `k`'s fleet total is the integer at [`ClusterKeys::key`]`(k)`.

mod buckets;
mod connect;
mod keys;
mod sink;
mod slot;

pub(crate) use slot::slot_of;

pub(crate) use connect::{connect, Cluster};
pub use keys::{ClusterKeys, MAX_BUCKETS};
pub use sink::{Durability, RedisClusterSink, RedisClusterSinkError, Repairs};
