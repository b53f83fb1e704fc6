//! Reading a debate's full state over `parley.debates.status`, as a client (the CLI, the
//! web server) does: the reply is the state itself, or the first page of a snapshot whose
//! other pages are fetched and put back together (see [`parley_protocol::status`]).

use std::future::Future;

use futures::StreamExt as _;
use parley_protocol::StatusPage;
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
    let first = request(json!({ "debateId": id }).to_string().into_bytes()).await?;
    let Some(page) = StatusPage::from_reply(&first) else {
        return Ok(first);
    };
    let (snapshot, count) = (page.snapshot, page.pages);
    let (request, fault) = (&request, &fault);
    let rest: Vec<Result<StatusPage, E>> = futures::stream::iter(1..count)
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
        .collect()
        .await;
    let mut pages = vec![page];
    for p in rest {
        pages.push(p?);
    }
    let text = StatusPage::assemble(pages)
        .map_err(|e| fault(format!("cannot reassemble the state of debate {id}: {e}")))?;
    serde_json::from_str(&text).map_err(|e| fault(format!("unreadable state of debate {id}: {e}")))
}
