//! A key set's round trip on a Redis Cluster: one script call per bucket
//! (`MGET` of its keys, one slot), all buckets in one cluster pipeline.

use super::reply::{glob_escape, utf8_pairs, value_of, Failure, ALL_SCRIPT};
use crate::export::redis_cluster::Cluster;
use crate::export::redis_cluster::ClusterKeys;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, Value};
use std::time::Duration;

/// `MGET` of one bucket's keys: a script, because a cluster pipeline
/// refuses `MGET` (it cannot tell the keys share a slot).
const MGET: &str = "return redis.call('MGET', unpack(KEYS))";

/// A new connection to the cluster (after any connection error: the sync
/// cluster client keeps a dead master's address otherwise).
pub(super) fn connect(nodes: &[String], timeout: Duration) -> Result<Cluster, redis::RedisError> {
    crate::export::redis_cluster::connect(nodes, timeout)
}

/// Sends `cmds` in one cluster pipeline (every master at once); if a reply
/// is an error (a redirect), each again on its own, following it.
fn send(conn: &mut Cluster, cmds: &[Cmd]) -> Result<Vec<Value>, redis::RedisError> {
    let mut pipe = redis::cluster::cluster_pipe();
    for c in cmds {
        pipe.add_command(c.clone());
    }
    match pipe.query::<Vec<Value>>(conn) {
        Err(e) if e.clone().into_server_errors().is_some() => cmds
            .iter()
            .map(|c| redis::ConnectionLike::req_command(conn, c))
            .collect(),
        r => r,
    }
}

/// The values of `names`, in order (absent keys read 0).
pub(super) fn read_keys(
    conn: &mut Cluster,
    keys: &ClusterKeys,
    names: &[String],
) -> Result<Vec<(String, i64)>, Failure> {
    let mut by_bucket: Vec<Vec<usize>> = vec![Vec::new(); keys.buckets()];
    for (i, n) in names.iter().enumerate() {
        by_bucket[keys.bucket_of(n)].push(i);
    }
    let groups: Vec<&Vec<usize>> = by_bucket.iter().filter(|g| !g.is_empty()).collect();
    let cmds: Vec<Cmd> = groups
        .iter()
        .map(|g| {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(MGET).arg(g.len());
            for &i in *g {
                cmd.arg(keys.key(&names[i]));
            }
            cmd
        })
        .collect();
    let replies = send(conn, &cmds)?;
    let mut out: Vec<Option<(String, i64)>> = vec![None; names.len()];
    for (g, reply) in groups.iter().zip(replies) {
        let got: Vec<Option<Vec<u8>>> = redis::from_redis_value(reply).map_err(|e| Failure {
            message: format!("redis cluster: unexpected MGET reply ({e})"),
            answered: true,
            closed: false,
        })?;
        if got.len() != g.len() {
            return Err(Failure {
                message: format!("redis cluster: {} values for {} keys", got.len(), g.len()),
                answered: true,
                closed: false,
            });
        }
        for (&i, v) in g.iter().zip(got) {
            out[i] = Some(value_of(&names[i], &keys.key(&names[i]), v)?);
        }
    }
    Ok(out
        .into_iter()
        .map(|v| v.expect("every key read"))
        .collect())
}

/// Every integer counter key of the layout, from every master's `SCAN`.
pub(super) fn read_all(
    conn: &mut Cluster,
    keys: &ClusterKeys,
) -> Result<Vec<(String, i64)>, Failure> {
    let pattern = format!("{}\\{{*", glob_escape(keys.prefix()));
    let mut cmd = redis::cmd("EVAL");
    // Nothing reserved at the script's level: the name after the tag is
    // checked here.
    cmd.arg(ALL_SCRIPT).arg(0).arg(pattern).arg("\n");
    let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let Value::Map(per_node) = conn.route_command(&cmd, all)? else {
        return Err(Failure {
            message: "redis cluster: unexpected reply to a script on every master".into(),
            answered: true,
            closed: false,
        });
    };
    let mut out: Vec<(String, i64)> = Vec::new();
    for (_, listing) in per_node {
        let flat: Vec<Vec<u8>> = redis::from_redis_value(listing).map_err(|e| Failure {
            message: format!("redis cluster: unexpected SCAN reply ({e})"),
            answered: true,
            closed: false,
        })?;
        for (k, v) in utf8_pairs(flat) {
            let Some(name) = k
                .strip_prefix(keys.prefix())
                .and_then(|rest| rest.split_once('}'))
                .map(|(_, name)| name)
            else {
                continue;
            };
            // Only a key where this layout puts it (not another bucket
            // count's, nor the sink's own records).
            if name.starts_with(crate::export::RESERVED_PREFIX) || keys.key(name) != k {
                continue;
            }
            if let Ok(v) = v.parse() {
                out.push((name.to_owned(), v));
            }
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    Ok(out)
}
