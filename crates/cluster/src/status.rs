//! Reading a debate's full state over `parley.debates.status`, as a client (the CLI, the
//! web server) does: the reply is the state itself, or the first page of a snapshot whose
//! other pages are fetched and put back together (see [`parley_protocol::status`]).

use std::future::Future;

use futures::{StreamExt as _, TryStreamExt as _};
use parley_protocol::{StatusPage, MAX_STATE_BYTES, MAX_STATE_PAGES};
use serde_json::{json, Value};

/// How many pages are asked for at once.
const PAGES_AT_ONCE: usize = 8;

/// The state JSON of debate `id`. `request` sends a body on `parley.debates.status` and
/// returns the reply (the caller's own timeout and error replies); `fault` makes the
/// caller's error from a message (a page that is not one, pages that do not fit together,
/// state that is not JSON).
pub async fn fetch_state<E, F, Fut>(
    id: &str,
    request: F,
    fault: impl Fn(String) -> E,
) -> Result<Value, E>
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Value, E>>,
{
    fetch_view(id, "full", request, fault).await
}

/// [`fetch_state`] of another view of the status request: `full` (the state) or `record`
/// (the decision record), both inline or in pages.
pub async fn fetch_view<E, F, Fut>(
    id: &str,
    view: &str,
    request: F,
    fault: impl Fn(String) -> E,
) -> Result<Value, E>
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Value, E>>,
{
    let first = request(
        json!({ "debateId": id, "view": view })
            .to_string()
            .into_bytes(),
    )
    .await?;
    let Some(page) = StatusPage::from_reply(&first) else {
        return Ok(first);
    };
    let (snapshot, count) = (page.snapshot, page.pages);
    if count == 0 || count > MAX_STATE_PAGES || page.bytes > MAX_STATE_BYTES {
        return Err(fault(format!(
            "the state of debate {id} is announced as {count} pages of {} bytes in all; \
             at most {MAX_STATE_PAGES} pages and {MAX_STATE_BYTES} bytes are read",
            page.bytes
        )));
    }
    let (request, fault) = (&request, &fault);
    // The first failed page ends the fetch.
    let rest: Vec<StatusPage> = futures::stream::iter(1..count)
        .map(|k| async move {
            let body = json!({ "debateId": id, "snapshot": snapshot, "page": k });
            let v = request(body.to_string().into_bytes()).await?;
            StatusPage::from_reply(&v).ok_or_else(|| {
                fault(format!(
                    "unexpected reply for page {k} of debate {id}'s state"
                ))
            })
        })
        .buffered(PAGES_AT_ONCE)
        .try_collect()
        .await?;
    let mut pages = vec![page];
    pages.extend(rest);
    let text = StatusPage::assemble(pages)
        .map_err(|e| fault(format!("cannot reassemble the state of debate {id}: {e}")))?;
    serde_json::from_str(&text).map_err(|e| fault(format!("unreadable state of debate {id}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A server reply claiming `pages` pages of `bytes` bytes.
    fn page(k: u32, pages: u32, bytes: u64, data: &str) -> Value {
        json!({"debateId": "d", "snapshot": 1, "page": k, "pages": pages, "bytes": bytes,
               "data": data})
    }

    async fn fetch(replies: impl Fn(u32) -> Value) -> (Result<Value, String>, usize) {
        let asked = AtomicUsize::new(0);
        let r = fetch_state(
            "d",
            |body| {
                asked.fetch_add(1, Ordering::SeqCst);
                let v: Value = serde_json::from_slice(&body).unwrap();
                let k = v["page"].as_u64().unwrap_or(0) as u32;
                let reply = replies(k);
                async move { Ok(reply) }
            },
            |m| m,
        )
        .await;
        (r, asked.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn pages_are_put_back_together() {
        let (r, asked) = fetch(|k| page(k, 2, 9, ["{\"a\":", "\"b\"}"][k as usize])).await;
        assert_eq!(r.unwrap(), json!({"a": "b"}));
        assert_eq!(asked, 2);
        let (r, _) = fetch(|_| json!({"status": "running"})).await;
        assert_eq!(r.unwrap()["status"], "running");
    }

    #[tokio::test]
    async fn a_hostile_first_page_is_refused_before_more_are_asked() {
        for (pages, bytes) in [(u32::MAX, 10), (0, 0), (2, u64::MAX)] {
            let (r, asked) = fetch(|k| page(k, pages, bytes, "x")).await;
            let e = r.unwrap_err();
            assert!(e.contains("at most"), "{e}");
            assert_eq!(asked, 1, "{pages} pages, {bytes} bytes");
        }
    }

    #[tokio::test]
    async fn a_bad_page_ends_the_fetch_with_an_error() {
        let (r, asked) = fetch(|k| {
            if k == 0 {
                page(0, 1000, 1000, "x")
            } else {
                json!({"error": {"code": "internal", "message": "?"}})
            }
        })
        .await;
        assert!(r.unwrap_err().contains("unexpected reply for page"));
        assert!(asked <= 1 + 2 * PAGES_AT_ONCE, "{asked} requests");
        // Pages that do not add up to what the first announced.
        let (r, _) = fetch(|k| page(k, 2, 99, "{}")).await;
        assert!(r.unwrap_err().contains("cannot reassemble"));
    }
}
