//! Everything per-thread, written once: each thread's identity (its shard
//! probe), the contention sampler, the per-thread slot registry (thread
//! indexes) and each index's arena of hot words (`arena`), and the owner
//! ids that give the threads adding to a sharded table their own rows
//! (`owner`).
//!
//! A thread gets a probe once, from a process-wide sequence so the first
//! threads spread over distinct shards, kept in a `const`-initialised
//! thread-local: reading it is a bare TLS load, never a hash of the thread
//! id. A thread that keeps colliding with others moves by rehashing its probe
//! (xorshift, which never yields zero from a non-zero input).

pub(crate) mod arena;
mod buckets;
pub(crate) mod grace;
mod index;
mod max_shards;
mod nudge;
pub(crate) mod owner;
mod pool;
mod probe;
pub(crate) mod reentry;
pub(crate) mod sampler;
pub(crate) mod sleepers;
pub(crate) mod slots;
pub(crate) mod window;

pub(crate) use index::{index, slot_position};
pub(crate) use max_shards::{default_max_shards, MAX_SHARDS};
pub(crate) use probe::{probe, probe_or_zero, rehash, token};
