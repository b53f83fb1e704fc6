//! Services started while Redis cannot be reached (a server starting, a master failing
//! over) wait for it, as they wait for NATS, and come up when it returns.
//!
//! Build the binaries first: `cargo build --workspace --bins`.

use std::process::Command;
use std::time::Duration;

use parley_tests::*;

/// `bin` with `flags`, logging at `info`, without waiting for it to be ready.
fn spawn(bin: &str, flags: &[(&str, String)]) -> ChildProcess {
    let mut cmd = Command::new(workspace_bin(bin));
    for (flag, value) in flags {
        cmd.arg(flag).arg(value);
    }
    cmd.env("PARLEY_LOG", "info")
        .env("PARLEY_METRICS_ADDR", "off")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY");
    ChildProcess::spawn(cmd, bin).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_started_while_redis_is_down_wait_for_it() {
    let c = Cluster::start().await;
    // The services reach Redis through a sentinel that names a master which is down (as
    // during a failover): the connection is refused at once, again and again.
    let mut master = RedisServer::start().unwrap();
    let sentinel =
        RedisSentinel::start("parley-start", master.port(), 1, Duration::from_secs(60)).unwrap();
    master.kill();
    let common = [
        ("--nats-url", c.nats.url()),
        (
            "--redis-url",
            format!("redis+sentinel://{}/parley-start", sentinel.addr()),
        ),
    ];
    let mut coordinator = spawn(
        "parley-coordinator",
        &[&common[..], &[("--lease-ttl-ms", "2000".into())]].concat(),
    );
    let mut worker = spawn(
        "parley-agent-worker",
        &[&common[..], &[("--config", c.config.display().to_string())]].concat(),
    );
    let mut judge = spawn(
        "parley-judge-worker",
        &[&common[..], &[("--config", c.config.display().to_string())]].concat(),
    );
    for p in [&mut coordinator, &mut worker, &mut judge] {
        let waiting = wait_until_async(Duration::from_secs(20), || {
            p.log().contains("cannot reach Redis yet; waiting for it")
        })
        .await;
        assert!(waiting, "no wait for Redis logged:\n{}", p.log());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in [&mut coordinator, &mut worker, &mut judge] {
        assert!(p.is_running(), "exited while Redis was down:\n{}", p.log());
    }
    master.restart().unwrap();
    let (coordinator, worker, judge) = tokio::task::spawn_blocking(move || {
        for (p, ready) in [
            (&coordinator, "coordinator ready"),
            (&worker, "worker ready"),
            (&judge, "worker ready"),
        ] {
            assert!(
                p.wait_for_log_line(ready, Duration::from_secs(30))
                    .is_some(),
                "not ready after Redis returned:\n{}",
                p.log()
            );
        }
        (coordinator, worker, judge)
    })
    .await
    .unwrap();
    let id = c.submit(&spec("Design a cache")).await;
    let state = c.wait_done(&id, Duration::from_secs(60)).await;
    assert_complete(&state);
    drop((coordinator, worker, judge));
}
