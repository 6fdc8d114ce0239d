//! A redis-server of the bench's own, shared by the Redis benches: a free
//! loopback port, its own directory, AOF `everysec`, no RDB; killed on drop.

use std::process::{Child, Command, Stdio};
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
