//! The connection every Redis Cluster path uses (the sink, `FleetStock`,
//! `FleetReader`): the `redis` crate's cluster client, built one way.
//!
//! Its limit, documented where users meet it: the client sends `READONLY`
//! on each new node connection after `redis::Connection` cleared its
//! connect timeout and before it sets the response timeout (redis 1.2),
//! so a node that accepts the connection and then stops answering blocks
//! that call until it answers or the connection fails. A node connection
//! type of our own could keep the timeout, but the cluster pipelines that
//! deliver to every master at once take only the client's own type.

use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::RedisResult;
use std::time::Duration;

/// A connection to a Redis Cluster.
pub(crate) type Cluster = ClusterConnection;

/// A new connection to the cluster whose seed nodes are `nodes`, each
/// connect and each command timing out after `timeout` (but see the module
/// notes). Few retries: callers retry with their own back-off, and the
/// client's own would block on a dead master for seconds.
pub(crate) fn connect(nodes: &[String], timeout: Duration) -> RedisResult<Cluster> {
    ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(2)
        .build()?
        .get_connection()
}
