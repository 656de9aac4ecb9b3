//! The web UI: static files built into the binary (`build.rs` embeds `ui/`), served at `/ui/`
//! from the same origin as the API, so the browser calls the API with the token the person
//! signed in with (kept in the tab's `sessionStorage`, sent as `Authorization: Bearer`). The
//! pages themselves are public: they hold no data until the API answers with a token.
//!
//! A path below `/ui/` that names no file (`/ui/tasks/<id>`) gets `index.html`: the page
//! routes itself. `UI_DIR` serves the folder instead of the built-in copy, for working on the
//! UI without rebuilding.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::state::AppState;

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

/// Scripts, styles and connections from this origin only; nothing may frame the UI.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data: blob:; connect-src 'self'; frame-src blob:; \
                   object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(asset))
}

async fn index(State(state): State<AppState>) -> Response {
    serve(&state, "index.html").await
}

async fn asset(State(state): State<AppState>, Path(path): Path<String>) -> Response {
    // A client-side route (no extension) is the page itself.
    let last = path.rsplit('/').next().unwrap_or_default();
    if last.contains('.') {
        serve(&state, &path).await
    } else {
        serve(&state, "index.html").await
    }
}

async fn serve(state: &AppState, path: &str) -> Response {
    let bytes: Option<std::borrow::Cow<'static, [u8]>> = match &state.settings.ui_dir {
        Some(dir) if !path.split('/').any(|part| part == ".." || part.is_empty()) => {
            tokio::fs::read(dir.join(path)).await.ok().map(Into::into)
        }
        Some(_) => None,
        None => ASSETS
            .iter()
            .find(|(name, _)| *name == path)
            .map(|(_, bytes)| (*bytes).into()),
    };
    let Some(bytes) = bytes else {
        return (StatusCode::NOT_FOUND, "no such file in the UI").into_response();
    };
    let mut response = axum::body::Body::from(bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(path)),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Small files, and a new binary may change them: the browser asks again each time.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "ico" => "image/x-icon",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_is_built_in() {
        assert!(super::ASSETS.iter().any(|(name, _)| *name == "index.html"));
    }
}
