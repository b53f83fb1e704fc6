//! The page: HTML, CSS and JavaScript written for Parley (no framework, no build step),
//! compiled into the binary with `include_str!`, and the security headers every response
//! carries.
//!
//! The Content-Security-Policy allows scripts, styles and connections from this origin
//! only: no inline script, no `eval`, no third-party anything. The page renders text from
//! models and users with DOM text nodes; the final solution's Markdown goes through
//! `app.js`'s own renderer, which builds DOM nodes (headings, lists, code, emphasis, and
//! links only to http/https) and never parses HTML.

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const ICON_SVG: &str = include_str!("../assets/icon.svg");

/// The Content-Security-Policy of every response.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// The page's routes, for a router of any state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| asset(INDEX_HTML, "text/html; charset=utf-8")))
        .route(
            "/app.js",
            get(|| asset(APP_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/app.css",
            get(|| asset(APP_CSS, "text/css; charset=utf-8")),
        )
        .route("/icon.svg", get(|| asset(ICON_SVG, "image/svg+xml")))
}

async fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Assets change with the binary; a reload after an upgrade gets the new ones.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// CSP, no sniffing, no framing, no referrer on every response.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ` onsomething=` attribute.
    fn has_inline_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(i, _)| {
            let rest = &html[i + 3..];
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        })
    }

    #[test]
    fn the_page_has_no_inline_script_and_no_inner_html() {
        assert!(INDEX_HTML.contains("<script src=\"/app.js\""));
        assert_eq!(
            INDEX_HTML.matches("<script").count(),
            1,
            "one external script"
        );
        assert!(!has_inline_handler(INDEX_HTML), "no inline event handlers");
        for bad in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!APP_JS.contains(bad), "app.js uses {bad}");
        }
    }
}
