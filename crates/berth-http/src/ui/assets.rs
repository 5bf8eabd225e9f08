//! The page's assets, compiled in: each with its content type, and the headers every page
//! answer carries (its content security policy among them).

use axum::Router;
use axum::http::StatusCode;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderName, HeaderValue, LOCATION,
    REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Only the page's own scripts, styles and images; API calls to its own origin; no frames, no
/// forms sent anywhere, no base rewriting.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// One file of the page.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "/ui/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../../ui/index.html"),
    },
    Asset {
        path: "/ui/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../ui/app.js"),
    },
    Asset {
        path: "/ui/view.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../ui/view.js"),
    },
    Asset {
        path: "/ui/api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../ui/api.js"),
    },
    Asset {
        path: "/ui/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../ui/app.css"),
    },
    Asset {
        path: "/ui/icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("../../ui/icon.svg"),
    },
];

fn page_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
    );
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    // The binary is the version: a new daemon serves a new page, so ask again each time.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The page's routes: `/ui` (a redirect), `/ui/` and its files.
pub fn pages() -> Router {
    let mut router = Router::new().route(
        "/ui",
        get(|| async {
            page_headers(
                (
                    StatusCode::PERMANENT_REDIRECT,
                    [(LOCATION, HeaderValue::from_static("/ui/"))],
                )
                    .into_response(),
            )
        }),
    );
    for asset in ASSETS {
        let (content_type, body) = (asset.content_type, asset.body);
        router = router.route(
            asset.path,
            get(move || async move {
                page_headers(([(CONTENT_TYPE, content_type)], body).into_response())
            }),
        );
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_no_script_or_style_but_its_own_files() {
        let index = ASSETS[0].body;
        assert!(!index.contains("<script>") && !index.contains("style="));
        for asset in ASSETS {
            for outside in ["http://", "https://", "//cdn"] {
                let found = asset
                    .body
                    .match_indices(outside)
                    .any(|(i, _)| !asset.body[i..].starts_with("http://www.w3.org"));
                assert!(!found, "{} loads from {outside}", asset.path);
            }
            assert!(!asset.body.contains("innerHTML"), "{}", asset.path);
            assert!(!asset.body.contains("document.cookie"), "{}", asset.path);
        }
        assert!(CONTENT_SECURITY_POLICY_VALUE.contains("script-src 'self'"));
        assert!(!CONTENT_SECURITY_POLICY_VALUE.contains("unsafe"));
    }
}
