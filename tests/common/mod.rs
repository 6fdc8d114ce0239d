//! A redis-server of the test's own: free loopback port, own directory,
//! AOF on with the fsync policy the test asks for, no RDB; killed (SIGKILL)
//! on drop. Without `redis-server` on the PATH the tests fail, on purpose:
//! install it with `.ci/install-redis`.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    fsync: &'static str,
    child: Option<Child>,
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().unwrap().port()
}

impl Server {
    /// A server on a free port with `appendfsync <fsync>` (not started).
    pub fn new(fsync: &'static str) -> Server {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "shardcount-redis-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Server {
            port: free_port(),
            dir,
            fsync,
            child: None,
        }
    }

    /// A started one.
    pub fn started(fsync: &'static str) -> Server {
        let mut s = Server::new(fsync);
        s.start();
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (or restarts) the server on its port and directory, and
    /// waits until it answers PING.
    pub fn start(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--appendonly", "yes", "--appendfsync", self.fsync])
            .args(["--save", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): these tests need it on the PATH; \
                     install it with .ci/install-redis (apt-get install -y redis-server)"
                )
            });
        self.child = Some(child);
        let client = redis::Client::open(self.url()).unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < until, "redis-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL by PID, and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    /// The values of `keys` (absent keys read as 0).
    pub fn values(&self, keys: &[String]) -> Vec<i64> {
        let mut c = self.conn();
        let got: Vec<Option<i64>> = redis::cmd("MGET").arg(keys).query(&mut c).unwrap();
        got.into_iter().map(|v| v.unwrap_or(0)).collect()
    }

    /// How many times `command` ran since the last `CONFIG RESETSTAT`
    /// (from `INFO commandstats`).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        let head = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&head))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
