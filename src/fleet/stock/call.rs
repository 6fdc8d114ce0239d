//! One call of the lease script on one part: sent (a take with its
//! WAITAOF, or on a durable cluster its WAIT), its reply read, and
//! classified; `call` resends it when that can help.

use super::error::FleetError;
use super::lease::Inner;
use super::link::{Conn, Link};
use super::op::{Kind, Op, Reply, MAX_AMOUNT};
use crate::export::redis::answered;
use crate::primitive::sync::atomic::Ordering;
use redis::Value;

impl Inner {
    /// One script call for `op` (reconnecting and reloading the script as
    /// needed); a NOSCRIPT reply reloads and resends once.
    pub(super) fn call(&self, link: &mut Link, p: usize, op: Op) -> Result<Reply, FleetError> {
        let mut r = self.call_once(link, p, op);
        if link.closed {
            // A connection from before a Redis restart fails on first use
            // though Redis may be up again: resend once, on a fresh one
            // (the same number: applied at most once).
            r = self.call_once(link, p, op);
        }
        // NOSCRIPT (Redis's script cache was flushed, or a promoted replica
        // never had the script): the script did not run, and `send` forgot
        // its hash on a connection it kept; the resend loads it again.
        let r = match r {
            Err(FleetError::Redis(_)) if link.sha.is_none() && link.conn.is_some() => {
                self.call_once(link, p, op)
            }
            r => r,
        };
        if let Err(FleetError::Invalid(_)) = r {
            // An add refused as too large: resolved, and its number given
            // up, never used again. An earlier copy of it (a send that
            // timed out, a connection dropped under it, a cluster client's
            // own resend) may still land later; a take under the same
            // number would be answered as a repeat of that add (units from
            // nowhere).
            let part = &mut link.parts[p];
            part.unresolved = None;
            part.given_up += 1;
        }
        r
    }

    /// One try of `op`'s script call on part `p`.
    fn call_once(&self, link: &mut Link, p: usize, op: Op) -> Result<Reply, FleetError> {
        let (values, waited) = self.send(link, p, op)?;
        let ints = read_reply(link, &values, waited)?;
        self.classify(link, p, op, ints.as_deref(), &values)
    }

    /// Connects if needed and sends `op`'s EVALSHA to part `p`, and for a
    /// take the WAITAOF behind it when the server has one, in one
    /// pipeline. Returns the replies and whether the WAITAOF was sent.
    fn send(&self, link: &mut Link, p: usize, op: Op) -> Result<(Vec<Value>, bool), FleetError> {
        let timeout = self.config.timeout;
        let reused = link.conn.is_some();
        link.closed = false;
        if let Err(e) = link.connect(timeout) {
            link.closed = reused && e.is_connection_dropped() && !e.is_timeout();
            let key = link.parts[p].stock_key.clone();
            return Err(link.failed(&e, &key));
        }
        let part = &link.parts[p];
        let mut script = redis::cmd("EVALSHA");
        script
            .arg(link.sha.as_deref().unwrap_or_default())
            .arg(if part.calls_key.is_some() { 3 } else { 2 })
            .arg(&part.stock_key)
            .arg(&part.leases_key);
        if let Some(calls) = &part.calls_key {
            script.arg(calls);
        }
        script
            .arg(&link.token)
            .arg(op.seq)
            .arg(op.kind.arg())
            .arg(op.amount);
        #[cfg(feature = "redis-cluster")]
        if let Some(Conn::Cluster(_)) = link.conn {
            return self.send_cluster(link, p, op, &script);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(script);
        // Only a lost take can oversell: it alone waits for the fsync.
        let wait = link.waitaof && matches!(op.kind, Kind::Take);
        if wait {
            // At least 1 ms: WAITAOF's 0 means "block for ever".
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            pipe.cmd("WAITAOF").arg(1).arg(0).arg(ms.max(1));
        }
        // Relaxed: a reporting tally.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let Some(Conn::Single(conn)) = link.conn.as_mut() else {
            unreachable!("connected above, to one server")
        };
        match pipe.query(conn) {
            Ok(values) => Ok((values, wait)),
            Err(e) if answered(&e) => {
                // The client reports a pipeline's server error as the
                // pipeline's, with the first failed command's code.
                if e.code() == Some("NOSCRIPT") {
                    link.sha = None;
                }
                let key = link.parts[p].stock_key.clone();
                Err(link.failed(&e, &key))
            }
            Err(e) => {
                link.closed = reused && e.is_connection_dropped() && !e.is_timeout();
                Err(link.lost(e.to_string()))
            }
        }
    }

    /// What the script's reply means: the amount and stock when it applied
    /// or repeated `op`, otherwise the error its code stands for.
    /// `send` on a cluster: the script through the cluster client (which
    /// follows redirects), then, for a take on a durable stock, `WAIT` on
    /// the part's master, on the same connection.
    #[cfg(feature = "redis-cluster")]
    fn send_cluster(
        &self,
        link: &mut Link,
        p: usize,
        op: Op,
        script: &redis::Cmd,
    ) -> Result<(Vec<Value>, bool), FleetError> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let super::link::Place::Cluster { durable, .. } = link.place else {
            unreachable!("a cluster connection")
        };
        let Some(Conn::Cluster(conn)) = link.conn.as_mut() else {
            unreachable!("connected by the caller")
        };
        // Relaxed: a reporting tally.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let reply = match redis::ConnectionLike::req_command(&mut **conn, script) {
            Ok(v) => v,
            Err(e) if answered(&e) => {
                if e.code() == Some("NOSCRIPT") {
                    link.sha = None;
                }
                let key = link.parts[p].stock_key.clone();
                return Err(link.failed(&e, &key));
            }
            Err(e) => return Err(link.lost(e.to_string())),
        };
        if let (Some((replicas, timeout)), Kind::Take) = (durable, op.kind) {
            let slot = crate::export::redis_cluster::slot_of(&link.parts[p].stock_key);
            let mut wait = redis::cmd("WAIT");
            wait.arg(replicas).arg(
                u64::try_from(timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
            let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            // Short of replicas: kept unresolved and resent (the script
            // answers the same grant, and a WAIT after it covers the first
            // run too); the connection is in step and kept, so the other
            // parts go on. An error (the slot map is stale: a replica
            // refuses WAIT; or no answer) drops the connection, and the
            // next call learns the topology afresh.
            match conn.route_command(&wait, to) {
                Ok(Value::Int(n)) if n >= i64::from(replicas) => {}
                Ok(v) => {
                    return Err(FleetError::Redis(format!(
                        "WAIT: the take is on fewer than {replicas} replicas yet ({v:?})"
                    )))
                }
                Err(e) => return Err(link.lost(format!("WAIT: {e}"))),
            }
        }
        Ok((vec![reply], false))
    }

    fn classify(
        &self,
        link: &mut Link,
        p: usize,
        op: Op,
        ints: Option<&[i64]>,
        values: &[Value],
    ) -> Result<Reply, FleetError> {
        match ints {
            // A grant is never negative nor 2^53 or more (the script's
            // bound); anything else came from a record edited by hand.
            Some([0 | 1, amount, ..]) if !(0..MAX_AMOUNT as i64).contains(amount) => {
                Err(FleetError::Corrupt(format!(
                    "{}: this token's record holds an amount out of range: {amount}",
                    link.parts[p].leases_key
                )))
            }
            Some([code @ (0 | 1), amount, stock, lost]) => {
                let given_up = std::mem::take(&mut link.parts[p].given_up);
                let lost = (*lost as u64).saturating_sub(given_up);
                if *code == 1 && lost > 0 {
                    // Relaxed: a reporting tally.
                    self.lost_ops.fetch_add(lost, Ordering::Relaxed);
                }
                Ok(Reply {
                    amount: *amount as u64,
                    stock: *stock,
                })
            }
            Some([-2, last]) => Err(FleetError::Corrupt(format!(
                "{}: this token's record is at operation {last}, past {}: \
                 another writer changed it; nothing was applied",
                link.parts[p].leases_key, op.seq
            ))),
            Some([-3, stock]) => Err(FleetError::Invalid(format!(
                "adding {} to {} would take the stock to 2^53 or more",
                op.amount, stock
            ))),
            Some([-1]) => Err(FleetError::Corrupt(format!(
                "{} or {} does not hold a stock's layout",
                link.parts[p].stock_key, link.parts[p].leases_key
            ))),
            _ => Err(link.lost(format!("unexpected script reply {values:?}"))),
        }
    }
}

/// The script's reply as integers (`None` for another shape), once a
/// WAITAOF sent with it confirms the take is on disk.
fn read_reply(
    link: &mut Link,
    values: &[Value],
    waited: bool,
) -> Result<Option<Vec<i64>>, FleetError> {
    if waited {
        let fsynced = match values.get(1) {
            Some(Value::Array(a)) => matches!(a.first(), Some(Value::Int(n)) if *n >= 1),
            _ => false,
        };
        if !fsynced {
            return Err(link.lost("WAITAOF: the take is not on disk yet".into()));
        }
    }
    match values.first() {
        Some(Value::Array(items)) => Ok(items
            .iter()
            .map(|x| match x {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect()),
        Some(Value::ServerError(e)) => {
            if e.code() == "NOSCRIPT" {
                link.sha = None;
            }
            Err(FleetError::Redis(format!("{e:?}")))
        }
        _ => Ok(None),
    }
}
