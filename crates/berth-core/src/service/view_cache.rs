//! The serialized views of instances `GET` answers, by instance, each with the store revision it
//! was made from (see `serialized`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::ids::InstanceId;

/// The serialized views last made, by instance, with the revision each was made from.
#[derive(Clone, Default)]
pub(super) struct SerializedViews {
    views: Arc<RwLock<HashMap<InstanceId, (u64, Bytes)>>>,
}

impl SerializedViews {
    /// The view made from exactly this revision, if one was.
    pub(super) fn hit(&self, id: &InstanceId, revision: u64) -> Option<Bytes> {
        let views = self.views.read().unwrap_or_else(|e| e.into_inner());
        views
            .get(id)
            .filter(|(made_from, _)| *made_from == revision)
            .map(|(_, bytes)| bytes.clone())
    }

    /// Keeps a view unless one of a newer revision is kept already.
    pub(super) fn keep(&self, id: InstanceId, revision: u64, bytes: Bytes) {
        let mut views = self.views.write().unwrap_or_else(|e| e.into_inner());
        let entry = views.entry(id).or_insert((revision, bytes.clone()));
        if entry.0 < revision {
            *entry = (revision, bytes);
        }
    }
}
