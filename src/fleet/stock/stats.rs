//! What a `FleetStock` has done so far.

/// What a [`FleetStock`](super::fleet_stock::FleetStock) has done so far
/// (counts since it was built).
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
    /// [`FleetStock`](super::fleet_stock::FleetStock)'s "Redis restarts".
    pub lost_ops: u64,
    /// Units taken out of the lease for a return not yet confirmed.
    pub in_flight: u64,
}
