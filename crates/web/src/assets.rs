//! The page: HTML, CSS and JavaScript written for Parley (no framework, no build step),
//! compiled into the binary with `include_str!`, and the security headers every response
//! carries.
//!
//! The Content-Security-Policy allows scripts, styles and connections from this origin
//! only: no inline script, no `eval`, no third-party anything. The page renders text from
//! models and users with DOM text nodes; the final solution's Markdown goes through
//! the page's own renderer (`js/markdown.js`), which builds DOM nodes (headings, lists,
//! code, emphasis, and links only to http/https) and never parses HTML.
//!
//! The script is ES modules, loaded by the browser as they are (no bundle): `app.js` (the
//! entry, `<script type="module">`) imports the modules of [`MODULES`], each served at its
//! path with a JavaScript content type.

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

/// The page's ES modules that `app.js` imports: (path, source).
const MODULES: &[(&str, &str)] = &[
    ("/js/api.js", include_str!("../assets/js/api.js")),
    ("/js/dom.js", include_str!("../assets/js/dom.js")),
    ("/js/events.js", include_str!("../assets/js/events.js")),
    ("/js/form.js", include_str!("../assets/js/form.js")),
    ("/js/format.js", include_str!("../assets/js/format.js")),
    ("/js/list.js", include_str!("../assets/js/list.js")),
    ("/js/markdown.js", include_str!("../assets/js/markdown.js")),
    ("/js/state.js", include_str!("../assets/js/state.js")),
    ("/js/view.js", include_str!("../assets/js/view.js")),
    (
        "/js/panels/clarify.js",
        include_str!("../assets/js/panels/clarify.js"),
    ),
    (
        "/js/panels/flow.js",
        include_str!("../assets/js/panels/flow.js"),
    ),
    (
        "/js/panels/head.js",
        include_str!("../assets/js/panels/head.js"),
    ),
    (
        "/js/panels/human.js",
        include_str!("../assets/js/panels/human.js"),
    ),
    (
        "/js/panels/rounds.js",
        include_str!("../assets/js/panels/rounds.js"),
    ),
    (
        "/js/panels/solution.js",
        include_str!("../assets/js/panels/solution.js"),
    ),
];

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// The Content-Security-Policy of every response.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// The page's routes, for a router of any state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let router = Router::new()
        .route("/", get(|| asset(INDEX_HTML, "text/html; charset=utf-8")))
        .route("/app.js", get(|| asset(APP_JS, JAVASCRIPT)))
        .route(
            "/app.css",
            get(|| asset(APP_CSS, "text/css; charset=utf-8")),
        )
        .route("/icon.svg", get(|| asset(ICON_SVG, "image/svg+xml")));
    MODULES.iter().fold(router, |router, &(path, body)| {
        router.route(path, get(move || asset(body, JAVASCRIPT)))
    })
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
        assert!(INDEX_HTML.contains("<script type=\"module\" src=\"/app.js\""));
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
            for (path, source) in
                std::iter::once(("/app.js", APP_JS)).chain(MODULES.iter().copied())
            {
                assert!(!source.contains(bad), "{path} uses {bad}");
            }
        }
    }

    /// Every module a script imports is served, and every module served is imported.
    #[test]
    fn every_imported_module_is_served() {
        let served: std::collections::BTreeSet<&str> = MODULES.iter().map(|(p, _)| *p).collect();
        let mut imported = std::collections::BTreeSet::new();
        for (path, source) in std::iter::once(("/app.js", APP_JS)).chain(MODULES.iter().copied()) {
            let dir = &path[..path.rfind('/').unwrap_or(0)];
            for line in source.lines().filter(|l| l.starts_with("import ")) {
                let target = line
                    .rsplit_once(" from '")
                    .and_then(|(_, rest)| rest.strip_suffix("';"))
                    .unwrap_or_else(|| panic!("{path}: an import without a module path: {line}"));
                imported.insert(resolve(dir, target));
            }
        }
        let imported: std::collections::BTreeSet<&str> =
            imported.iter().map(String::as_str).collect();
        assert_eq!(imported, served);
    }

    /// `target` (`./x.js`, `../x.js`) relative to the directory `dir` (`/js`).
    fn resolve(dir: &str, target: &str) -> String {
        let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
        for segment in target.split('/') {
            match segment {
                "." => {}
                ".." => {
                    parts.pop();
                }
                s => parts.push(s),
            }
        }
        format!("/{}", parts.join("/"))
    }

    #[tokio::test]
    async fn modules_are_served_as_javascript() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, routes::<()>()).await });
        for path in ["/app.js", "/js/markdown.js", "/js/panels/rounds.js"] {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            conn.write_all(request.as_bytes()).await.unwrap();
            let mut reply = String::new();
            conn.read_to_string(&mut reply).await.unwrap();
            let head = reply.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
            assert!(
                head.contains(&format!("content-type: {JAVASCRIPT}")),
                "{path}: {head}"
            );
        }
    }
}
