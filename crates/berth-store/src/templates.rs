//! The templates table.

use rusqlite::{OptionalExtension, Row, params};

use crate::{StoreError, Tx};
use berth_domain::ids::DomainId;
use berth_domain::templates::{Template, TemplateState};
use berth_domain::time::Timestamp;

const TEMPLATE_COLUMNS: &str =
    "id, domain_id, recipe, image, state, volumes, created_at, ready_at, build_ms";

fn template_from_row(row: &Row<'_>) -> rusqlite::Result<Template> {
    let domain: String = row.get(1)?;
    let state: String = row.get(4)?;
    let volumes: String = row.get(5)?;
    Ok(Template {
        id: row.get(0)?,
        domain_id: DomainId::parse(&domain).ok_or(rusqlite::Error::InvalidQuery)?,
        recipe: row.get(2)?,
        image: row.get(3)?,
        state: TemplateState::parse(&state).ok_or(rusqlite::Error::InvalidQuery)?,
        volumes: serde_json::from_str(&volumes).map_err(|_| rusqlite::Error::InvalidQuery)?,
        created_at: Timestamp::from_millis(row.get(6)?),
        ready_at: row.get::<_, Option<i64>>(7)?.map(Timestamp::from_millis),
        build_ms: row.get(8)?,
    })
}

impl Tx<'_> {
    /// Template `id` of `domain`.
    pub fn template(&self, domain: &DomainId, id: &str) -> Result<Option<Template>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                &format!(
                    "SELECT {TEMPLATE_COLUMNS} FROM templates WHERE domain_id = ?1 AND id = ?2"
                ),
                params![domain.as_str(), id],
                template_from_row,
            )
            .optional()?)
    }

    /// A domain's templates, newest first.
    pub fn templates(&self, domain: &DomainId) -> Result<Vec<Template>, StoreError> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {TEMPLATE_COLUMNS} FROM templates WHERE domain_id = ?1
             ORDER BY created_at DESC, id"
        ))?;
        let rows = stmt.query_map([domain.as_str()], template_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stores template `t`, or what changed of it.
    pub fn save_template(&self, t: &Template) -> Result<(), StoreError> {
        let volumes = serde_json::to_string(&t.volumes)
            .map_err(|e| StoreError::Corrupt(format!("volumes of template {}: {e}", t.id)))?;
        self.conn().execute(
            "INSERT INTO templates (id, domain_id, recipe, image, state, volumes, created_at,
                ready_at, build_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(domain_id, id) DO UPDATE SET state = excluded.state,
                volumes = excluded.volumes, ready_at = excluded.ready_at,
                build_ms = excluded.build_ms",
            params![
                t.id,
                t.domain_id.as_str(),
                t.recipe,
                t.image,
                t.state.as_str(),
                volumes,
                t.created_at.millis(),
                t.ready_at.map(Timestamp::millis),
                t.build_ms,
            ],
        )?;
        Ok(())
    }

    /// Forgets template `id` of `domain` (its volumes were removed).
    pub fn delete_template(&self, domain: &DomainId, id: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "DELETE FROM templates WHERE domain_id = ?1 AND id = ?2",
            params![domain.as_str(), id],
        )?;
        Ok(())
    }
}
