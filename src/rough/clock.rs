//! The clock of the interval rule: read at a thread's checks (at most
//! every 512 counts), so its cost is a share of every add.
//!
//! On Linux it is `CLOCK_MONOTONIC_COARSE`: the kernel's last tick, read
//! from the vDSO with no time-stamp counter (about 3 ns here, against
//! about 23 for `Instant::now`), with a resolution of one scheduler tick
//! (1 to 10 ms, 4 on most kernels). Elsewhere, `Instant`.

/// Nanoseconds on a monotonic clock, from an arbitrary origin.
#[cfg(target_os = "linux")]
pub(super) fn nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; the call writes only
    // it, and cannot fail for a clock id the kernel has had since 2.6.32.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    debug_assert_eq!(r, 0, "CLOCK_MONOTONIC_COARSE is always there");
    // Both fields are non-negative on a monotonic clock.
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Nanoseconds on a monotonic clock, from an arbitrary origin.
#[cfg(not(target_os = "linux"))]
pub(super) fn nanos() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_interval_clock_never_goes_back_and_follows_real_time() {
        let a = super::nanos();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = super::nanos();
        // Coarse: one tick (at most 10 ms) may be missing at either end.
        assert!(b >= a + 10_000_000, "{a} then {b}");
        assert!(b - a < 10_000_000_000, "{a} then {b}");
    }
}
