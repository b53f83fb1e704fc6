//! Which master a `redis+sentinel://` connection writes to when the sentinels disagree:
//! two real redis-servers that both call themselves master (an old master that restarted
//! before the sentinels demoted it, and the promoted replica), and two sentinels speaking
//! the protocol over loopback, the first still naming the old master under the previous
//! configuration epoch. The write must go to the master named under the newest epoch.

use std::sync::{Arc, Mutex};

use parley_cluster::RedisConnection;
use parley_testkit::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A sentinel that names `(port, epoch)` as the master `mymaster` (changeable while it
/// runs) and answers `+OK` to anything else a client sends while connecting.
async fn fake_sentinel(named: Arc<Mutex<(u16, u64)>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let named = named.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read);
                loop {
                    // One command: *N, then N bulk strings ($len, text).
                    let mut line = String::new();
                    if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let n: usize = line.trim().trim_start_matches('*').parse().unwrap_or(0);
                    let mut parts = Vec::new();
                    for _ in 0..n {
                        let (mut len, mut text) = (String::new(), String::new());
                        let _ = lines.read_line(&mut len).await;
                        let _ = lines.read_line(&mut text).await;
                        parts.push(text.trim_end().to_uppercase());
                    }
                    let reply = if parts.first().map(String::as_str) == Some("SENTINEL") {
                        let (port, epoch) = *named.lock().unwrap();
                        let fields = [
                            ("name", "mymaster".to_string()),
                            ("ip", "127.0.0.1".to_string()),
                            ("port", port.to_string()),
                            ("flags", "master".to_string()),
                            ("config-epoch", epoch.to_string()),
                        ];
                        let mut r = format!("*{}\r\n", fields.len() * 2);
                        for (k, v) in fields {
                            r.push_str(&format!("${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()));
                        }
                        r
                    } else {
                        "+OK\r\n".to_string()
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn get(url: &str, key: &str) -> Option<String> {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_master_named_under_the_newest_epoch_takes_the_writes() {
    let old = RedisServer::start().unwrap();
    let promoted = RedisServer::start().unwrap();
    // The first sentinel has not heard of the failover yet.
    let stale = Arc::new(Mutex::new((old.port(), 1)));
    let current = Arc::new(Mutex::new((promoted.port(), 2)));
    let s1 = fake_sentinel(stale.clone()).await;
    let s2 = fake_sentinel(current.clone()).await;
    let url = format!("redis+sentinel://{s1},{s2}/mymaster");
    let mut conn = RedisConnection::connect(&url, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(get(&promoted.url(), "k").await.as_deref(), Some("v"));
    assert_eq!(
        get(&old.url(), "k").await,
        None,
        "written to the stale master"
    );
    assert!(conn.still_master().await.unwrap());

    // The sentinels fail over again, to the other server: the connection is no longer
    // to the master they name; it is dropped and the next write goes to the new one.
    *stale.lock().unwrap() = (old.port(), 3);
    *current.lock().unwrap() = (old.port(), 3);
    assert!(!conn.still_master().await.unwrap());
    let _: () = redis::cmd("SET")
        .arg("k2")
        .arg("v2")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(get(&old.url(), "k2").await.as_deref(), Some("v2"));
    assert_eq!(get(&promoted.url(), "k2").await, None);
}
