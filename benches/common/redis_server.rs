//! A redis-server of the bench's own, shared by the Redis benches: a free
//! loopback port, its own directory, AOF `everysec`, no RDB; killed on drop.

#![allow(dead_code)] // each bench uses a part of it

use shardcount::export::Source;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The server process and its directory.
pub struct Server(Child, std::path::PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Starts one and waits until it answers `PING`; returns it and its URL.
/// `name` keeps two benches' directories apart.
pub fn start_server(name: &str) -> (Server, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("shardcount-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(&dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (install it with .ci/install-redis)");
    let server = Server(child, dir);
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(url.as_str()).unwrap();
    while client
        .get_connection_with_timeout(Duration::from_millis(200))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_err()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, url)
}

/// The CPU seconds the server at `url` used so far (INFO cpu: user +
/// sys): what a figure of Redis CPU per operation divides.
pub fn server_cpu(url: &str) -> f64 {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("cpu").query(&mut c).unwrap();
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "used_cpu_user" || *k == "used_cpu_sys")
        .map(|(_, v)| v.trim().parse::<f64>().unwrap())
        .sum()
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `SHARDCOUNT_REPS`, default 5.
pub fn reps() -> usize {
    std::env::var("SHARDCOUNT_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

/// A keyed source whose every key moves by one per round: what the export
/// benches fold.
pub struct Keys {
    pub names: Vec<String>,
    pub values: Vec<AtomicU64>,
}

impl Source for Keys {
    fn read(&self, f: &mut dyn FnMut(&str, u64)) {
        for (n, v) in self.names.iter().zip(&self.values) {
            f(n, v.load(Ordering::Relaxed));
        }
    }
}
