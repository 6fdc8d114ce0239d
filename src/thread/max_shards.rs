//! How many shards a sharded type may grow to.

/// The most shards any sharded type accepts (a power of two): beyond this a
/// sum's walk over the shards costs more than contention could.
pub(crate) const MAX_SHARDS: usize = 1 << 16;

/// The default number of shards a sharded type may grow to: the next power
/// of two at or above `available_parallelism()`, and at least 2. Read once
/// per process, when first needed.
///
/// At least 2: `available_parallelism` follows the *calling thread's*
/// affinity mask, so on a thread pinned to one core it says 1, although
/// contention, which is what makes a counter grow, shows that threads do run
/// side by side. Read once: it costs syscalls and file reads.
pub(crate) fn default_max_shards() -> usize {
    static CACHED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CACHED.get_or_init(|| {
        crate::primitive::thread::available_parallelism()
            .max(2)
            .next_power_of_two()
            .min(MAX_SHARDS)
    })
}
