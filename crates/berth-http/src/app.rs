//! What every route shares: berth's operations, the service keys, the shutdown signal and the
//! OpenAPI document, behind one `Arc`.

use berth_core::Berth;
use tokio_util::sync::CancellationToken;

use crate::auth::ServiceKeys;

/// The largest JSON body a route accepts.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// What every route shares, behind one `Arc`: each request's middleware and handler take it
/// by value (axum's `State`), so a clone is one count, not a copy of berth's handles.
#[derive(Clone)]
pub struct App(pub(crate) std::sync::Arc<Shared>);

/// The parts of [`App`], which reads as them (`app.berth`, `app.keys`, ...).
pub struct Shared {
    /// berth's operations.
    pub berth: Berth,
    /// The service keys, with the web page's sessions that act for them.
    pub keys: ServiceKeys,
    /// Cancelled when berth begins to stop: streaming handlers (exec, followed logs) end on it.
    pub shutdown: CancellationToken,
    /// This API's OpenAPI document, marked with each operation's capability.
    pub doc: utoipa::openapi::OpenApi,
}

impl std::ops::Deref for App {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}
