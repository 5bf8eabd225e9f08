//! `GET` of one instance answered from its serialized view, kept per instance revision: an
//! instance that has not been written since it was last asked for is not serialized again.
//!
//! The store gives every write of an instance a new revision (an `observedAt` alone too, since
//! the view shows it); an entry made from an older revision is never answered. One entry per
//! instance, replaced by the next revision's, so the cache holds at most what the store's view
//! does.

use bytes::Bytes;

use super::Berth;
use crate::error::Error;
use crate::ids::DomainId;
use crate::store::Found;

impl Berth {
    /// One instance, archived or not, as the JSON of its `InstanceView`: what
    /// [`Berth::get`] answers, serialized once per revision of the instance.
    pub fn get_json(&self, owner: &str, domain_id: &DomainId, key: &str) -> Result<Bytes, Error> {
        let not_found = || Error::InstanceNotFound {
            domain: domain_id.to_string(),
            key: key.to_owned(),
        };
        let (id, revision) = match self.store().instance_revision(owner, domain_id, key) {
            Found::Instance(found) => found,
            Found::NoDomain => return Err(Error::DomainNotFound(domain_id.to_string())),
            Found::NotOwner => return Err(Error::DomainForbidden(domain_id.to_string())),
            Found::NoInstance => return Err(not_found()),
        };
        // While the engine is away every view says so: made fresh, not kept.
        if self.engine_unreachable().is_some() {
            let view = self.get(owner, domain_id, key)?;
            return serde_json::to_vec(&view).map(Bytes::from).map_err(|e| {
                tracing::error!(error = %e, "an instance's view could not be serialized");
                Error::Internal("an instance's view could not be serialized".to_owned())
            });
        }
        if let Some(bytes) = self.serialized.hit(&id, revision) {
            return Ok(bytes);
        }
        let (instance, revision) = self
            .store()
            .instance_at(domain_id, key)
            .ok_or_else(not_found)?;
        let bytes = Bytes::from(serde_json::to_vec(&self.annotated(instance.view())).map_err(|e| {
            tracing::error!(instance = %instance.id, error = %e, "an instance's view could not be serialized");
            Error::Internal("an instance's view could not be serialized".to_owned())
        })?);
        self.serialized.keep(instance.id, revision, bytes.clone());
        Ok(bytes)
    }
}
