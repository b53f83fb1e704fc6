//! What a cluster's estimates learn, on a real redis-server: samples come back newest first
//! per key, and the storage stays bounded in samples per key and in keys, even when
//! coordinators add them concurrently and a submitter names a new model every time.

use parley_cluster::redis_store::calibration::{KEYS_KEPT, SAMPLES_KEPT};
use parley_cluster::RedisStore;
use parley_protocol::calibration::Key;
use parley_testkit::RedisServer;

fn key(model: &str, kind: &str) -> Key {
    Key {
        provider: "openai-compatible".into(),
        model: model.into(),
        kind: kind.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_are_kept_per_key_newest_first_and_bounded() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    assert!(store.calibration().await.unwrap().entries.is_empty());
    for t in 1..=3 {
        store
            .record_completion(&key("m", "proposal"), t * 10)
            .await
            .unwrap();
    }
    store
        .record_completion(&key("m", "critique"), 7)
        .await
        .unwrap();
    let reply = store.calibration().await.unwrap();
    let of = |k: &Key| {
        reply
            .entries
            .iter()
            .find(|e| &e.key == k)
            .map(|e| e.tokens.clone())
    };
    assert_eq!(of(&key("m", "proposal")), Some(vec![30, 20, 10]));
    assert_eq!(of(&key("m", "critique")), Some(vec![7]));

    // Many samples of one key, from concurrent writers: the newest SAMPLES_KEPT stay.
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..(SAMPLES_KEPT as u64) {
                    store
                        .record_completion(&key("m", "proposal"), 1_000 + w * 1_000 + i)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let reply = store.calibration().await.unwrap();
    let kept = reply
        .entries
        .iter()
        .find(|e| e.key == key("m", "proposal"))
        .unwrap();
    assert_eq!(kept.tokens.len(), SAMPLES_KEPT);
    assert!(
        kept.tokens.iter().all(|&t| t >= 1_000),
        "old samples stayed"
    );

    // A new model every time: at most KEYS_KEPT keys, the most recently sampled.
    for i in 0..(KEYS_KEPT + 40) {
        store
            .record_completion(&key(&format!("hostile-{i}"), "proposal"), 5)
            .await
            .unwrap();
    }
    assert_eq!(store.calibration_keys().await.unwrap(), KEYS_KEPT);
    let reply = store.calibration().await.unwrap();
    assert_eq!(reply.entries.len(), KEYS_KEPT);
    let newest = format!("hostile-{}", KEYS_KEPT + 39);
    assert!(reply.entries.iter().any(|e| e.key.model == newest));
    assert!(!reply.entries.iter().any(|e| e.key.model == "hostile-0"));
    // The lists of the keys dropped are gone too: Redis holds the index and KEYS_KEPT lists.
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lists: Vec<String> = redis::cmd("KEYS")
        .arg("parley:{calibration}:s:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lists.len(), KEYS_KEPT);
    // Every key expires when it is no longer sampled.
    let ttl: i64 = redis::cmd("TTL")
        .arg("parley:{calibration}:keys")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0, "{ttl}");
    // What the bus carries decodes as what the estimates read.
    let bytes = serde_json::to_vec(&reply).unwrap();
    assert!(bytes.len() < 1024 * 1024, "{} bytes", bytes.len());
    let back = parley_protocol::calibration::CalibrationReply::decode(&bytes).unwrap();
    assert_eq!(back.entries.len(), KEYS_KEPT);
}

/// A coordinator's samples go through `CompletionSamples`: samples added faster than they
/// are written arrive in batches, in the order they were added, and none is lost; a batch
/// of more keys than one script call takes is written whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_samples_arrive_in_order_in_batches() {
    use parley_cluster::redis_store::calibration::CompletionSamples;
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let samples = CompletionSamples::start(store.clone());
    for i in 0..80u64 {
        samples.add(key("m", "proposal"), i);
        samples.add(key(&format!("model-{i}"), "critique"), i);
    }
    let mut reply = store.calibration().await.unwrap();
    for _ in 0..100 {
        let proposals = reply
            .entries
            .iter()
            .find(|e| e.key == key("m", "proposal"))
            .map_or(0, |e| e.tokens.len());
        if proposals == 80 && reply.entries.len() == 81 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        reply = store.calibration().await.unwrap();
    }
    let proposals = reply
        .entries
        .iter()
        .find(|e| e.key == key("m", "proposal"))
        .expect("the proposals' samples");
    assert_eq!(proposals.tokens, (0..80).rev().collect::<Vec<u64>>());
    assert_eq!(reply.entries.len(), 81, "every key written");

    // A batch of 100 keys at once (two script calls).
    let batch = (0..100u64)
        .map(|i| (key(&format!("batch-{i}"), "refine"), vec![i, i + 1]))
        .collect();
    store.record_completions(&batch).await.unwrap();
    let reply = store.calibration().await.unwrap();
    let b7 = reply
        .entries
        .iter()
        .find(|e| e.key == key("batch-7", "refine"))
        .expect("batch-7");
    assert_eq!(b7.tokens, vec![8, 7], "newest first");
    assert_eq!(reply.entries.len(), 181);
}
