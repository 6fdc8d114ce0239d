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
//!   the token (per part: a split stock, `split.rs`, numbers each part's
//!   operations apart, and a single server's stock is one part) and is kept
//!   in its part's `unresolved` until its reply arrives. A
//!   failed call (timeout, lost connection, lost reply) leaves it there,
//!   and it is sent again, unchanged, before any other operation on that
//!   part. The
//!   script answers a repeated number with the recorded amount and changes
//!   nothing, so a retried take grants once and a retried return adds once.
//!   The record keeps only the last number: a token has at most one
//!   operation outstanding, so no older one can come back. An add refused
//!   as too large gives its number up (`Part::given_up`), never used
//!   again: an earlier copy of it may still land.
//! * Returns take the whole lease out of `local` first (`drain`), then send
//!   it; until confirmed those units are in flight (in neither place).
//! * The idle worker (`worker::Worker`) returns the lease when `local`
//!   has not changed for `idle`; for that it only tries the link lock,
//!   never waiting behind a refill. (A split stock's pass, which samples
//!   the load, does wait for the lock: the load is highest then.)
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
//!
//! `fleet_stock`: the public type; `lease`: the lease and its numbered
//! operations; `call`: one script call; `link`: the connection and the
//! parts; `split`: the parts of a stock on a Redis Cluster.

mod call;
mod config;
mod error;
mod fleet_stock;
mod lease;
mod link;
#[cfg(feature = "redis-cluster")]
mod load;
mod op;
#[cfg(feature = "redis-cluster")]
mod split;
mod stats;

pub use config::FleetStockConfig;
pub use error::FleetError;
pub use fleet_stock::FleetStock;
#[cfg(feature = "redis-cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-cluster")))]
pub use load::StockSplit;
pub use op::LEASE_SCRIPT;
pub use stats::FleetStockStats;
