//! Real nats-server and redis-server processes: start, crash, restart on the same port.

use parley_testkit::{NatsServer, RedisServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends one RESP command and reads the reply (small replies only).
fn resp(port: u16, args: &[&str]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(cmd.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn nats_info(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn nats_server_starts_dies_and_restarts_on_the_same_port() {
    let mut nats = NatsServer::start().unwrap();
    let port = nats.port();
    assert_eq!(nats.url(), format!("nats://127.0.0.1:{port}"));
    let info = nats_info(port);
    assert!(info.starts_with("INFO "), "{info}");
    assert!(info.contains("\"jetstream\":true"), "{info}");

    nats.kill();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());

    nats.restart().unwrap();
    assert_eq!(nats.port(), port);
    assert!(nats_info(port).starts_with("INFO "));
    assert!(nats.store_dir().exists());
}

#[tokio::test]
async fn redis_server_keeps_acknowledged_writes_across_a_crash() {
    let mut redis = RedisServer::start().unwrap();
    let port = redis.port();
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}"));
    assert_eq!(resp(port, &["SET", "debate:1", "checkpoint"]), "+OK\r\n");

    redis.kill();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());

    redis.restart().unwrap();
    assert_eq!(resp(port, &["GET", "debate:1"]), "$10\r\ncheckpoint\r\n");
}

#[tokio::test]
async fn servers_use_distinct_ports_and_stop_on_drop() {
    let a = RedisServer::start().unwrap();
    let b = RedisServer::start().unwrap();
    assert_ne!(a.port(), b.port());
    let (port, data) = (a.port(), a.data_dir().to_path_buf());
    drop(a);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(!data.exists());
    assert_eq!(resp(b.port(), &["PING"]), "+PONG\r\n");
}

#[tokio::test]
async fn nats_server_takes_a_smaller_max_payload_and_keeps_it_across_a_restart() {
    let mut nats = NatsServer::start_with_max_payload(64 * 1024).unwrap();
    let info = nats_info(nats.port());
    assert!(info.contains("\"max_payload\":65536"), "{info}");
    assert!(info.contains("\"jetstream\":true"), "{info}");
    nats.restart().unwrap();
    assert!(nats_info(nats.port()).contains("\"max_payload\":65536"));
}

#[tokio::test]
async fn nats_server_runs_with_a_config_file_and_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("auth.conf");
    std::fs::write(
        &conf,
        "port: 4222\naccounts { A { jetstream: enabled, users: [{user: u, password: $TEST_NATS_PASSWORD}] } }\n",
    )
    .unwrap();
    let nats = NatsServer::start_with_config(&conf, &[("TEST_NATS_PASSWORD", "pw")]).unwrap();
    assert_ne!(nats.port(), 4222, "the file's port must not be used");
    let info = nats_info(nats.port());
    assert!(info.contains("\"auth_required\":true"), "{info}");
    assert_eq!(
        nats.url_as("u", "pw"),
        format!("nats://u:pw@127.0.0.1:{}", nats.port())
    );
}
