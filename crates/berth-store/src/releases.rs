//! The releases table: the images an instance has run, and rollbacks.

use rusqlite::{OptionalExtension, Row, params};

use crate::error::StoreError;
use crate::tx::Tx;
use berth_domain::evidence::ImageEvidence;
use berth_domain::ids::InstanceId;
use berth_domain::model::{Release, ReleaseEnd};
use berth_domain::time::Timestamp;

pub(super) fn release_from_row(row: &Row<'_>) -> rusqlite::Result<Release> {
    let ended: Option<String> = row.get(7)?;
    Ok(Release {
        seq: row.get(0)?,
        spec_digest: row.get(1)?,
        spec_json: row.get(2)?,
        image: row.get(3)?,
        image_digest: row.get(4)?,
        first_started_at: Timestamp::from_millis(row.get(5)?),
        last_started_at: Timestamp::from_millis(row.get(6)?),
        ended: ended
            .map(|e| ReleaseEnd::parse(&e).ok_or(rusqlite::Error::InvalidQuery))
            .transpose()?,
        ended_at: row.get::<_, Option<i64>>(8)?.map(Timestamp::from_millis),
    })
}

impl Tx<'_> {
    /// The image evidence last gathered for an instance.
    pub fn evidence(&self, id: &InstanceId) -> Result<Option<ImageEvidence>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT evidence FROM image_evidence WHERE instance_id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    /// An instance's releases, newest first.
    pub fn releases(&self, id: &InstanceId) -> Result<Vec<Release>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, spec_digest, spec, image, image_digest, first_started_at,
                last_started_at, ended, ended_at
             FROM releases WHERE instance_id = ?1 ORDER BY seq DESC",
        )?;
        let rows = stmt.query_map([id.as_str()], release_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Ends the instance's current release, if there is one.
    pub fn end_release(
        &self,
        id: &InstanceId,
        end: ReleaseEnd,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE releases SET ended = ?2, ended_at = ?3 WHERE instance_id = ?1 AND ended IS NULL",
            params![id.as_str(), end.as_str(), at.millis()],
        )?;
        Ok(())
    }

    /// The rollback asked with this idempotency key: its expected spec digest and its answer.
    pub fn rollback(
        &self,
        id: &InstanceId,
        idempotency_key: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT expected_spec_digest, result FROM rollbacks
                 WHERE instance_id = ?1 AND idempotency_key = ?2",
                params![id.as_str(), idempotency_key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// Keeps a rollback's answer under its idempotency key.
    pub fn insert_rollback(
        &self,
        id: &InstanceId,
        idempotency_key: &str,
        expected_spec_digest: &str,
        result: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO rollbacks (instance_id, idempotency_key, expected_spec_digest, result,
                created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                id.as_str(),
                idempotency_key,
                expected_spec_digest,
                result,
                Timestamp::now().millis()
            ],
        )?;
        Ok(())
    }

    /// The promotion asked with this idempotency key: the request it was asked with and its
    /// answer.
    pub fn promotion(
        &self,
        id: &InstanceId,
        idempotency_key: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT request, result FROM promotions
                 WHERE instance_id = ?1 AND idempotency_key = ?2",
                params![id.as_str(), idempotency_key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// Keeps a promotion's answer under its idempotency key, with the request it answered.
    pub fn insert_promotion(
        &self,
        id: &InstanceId,
        idempotency_key: &str,
        request: &str,
        result: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO promotions (instance_id, idempotency_key, request, result, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                id.as_str(),
                idempotency_key,
                request,
                result,
                Timestamp::now().millis()
            ],
        )?;
        Ok(())
    }
}
