//! The worktrees table: where each worktree key of a domain lives, as the CLI last told.

use rusqlite::{OptionalExtension, Row, params};

use crate::error::StoreError;
use crate::tx::Tx;
use berth_domain::ids::DomainId;
use berth_domain::time::Timestamp;
use berth_domain::worktrees::Worktree;

pub(super) const WORKTREE_COLUMNS: &str =
    "domain_id, key, path, branch, watched, seen_at, ended_at";

pub(super) fn worktree_from_row(row: &Row<'_>) -> rusqlite::Result<Worktree> {
    let domain: String = row.get(0)?;
    Ok(Worktree {
        domain_id: DomainId::parse(&domain).ok_or(rusqlite::Error::InvalidQuery)?,
        key: row.get(1)?,
        path: row.get(2)?,
        branch: row.get(3)?,
        watched: row.get(4)?,
        seen_at: Timestamp::from_millis(row.get(5)?),
        ended_at: row.get::<_, Option<i64>>(6)?.map(Timestamp::from_millis),
    })
}

impl Tx<'_> {
    /// One worktree key's record.
    pub fn worktree(&self, domain: &DomainId, key: &str) -> Result<Option<Worktree>, StoreError> {
        let sql =
            format!("SELECT {WORKTREE_COLUMNS} FROM worktrees WHERE domain_id = ?1 AND key = ?2");
        Ok(self
            .conn
            .query_row(&sql, params![domain.as_str(), key], worktree_from_row)
            .optional()?)
    }

    /// Writes a worktree's record whole (a new one, or one told of again, which is no longer
    /// ended), and touches the instances of its key, whose views carry it.
    pub fn put_worktree(&self, worktree: &Worktree) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO worktrees (domain_id, key, path, branch, watched, seen_at, ended_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (domain_id, key) DO UPDATE SET path = ?3, branch = ?4, watched = ?5,
                seen_at = ?6, ended_at = ?7",
            params![
                worktree.domain_id.as_str(),
                worktree.key,
                worktree.path,
                worktree.branch,
                worktree.watched,
                worktree.seen_at.millis(),
                worktree.ended_at.map(Timestamp::millis),
            ],
        )?;
        self.touch_worktree(&worktree.domain_id, &worktree.key)
    }

    /// Forgets a worktree's record (its domain is gone, or prune archived all it had).
    pub fn delete_worktree(&self, domain: &DomainId, key: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM worktrees WHERE domain_id = ?1 AND key = ?2",
            params![domain.as_str(), key],
        )?;
        self.touch_worktree(domain, key)
    }

    fn touch_worktree(&self, domain: &DomainId, key: &str) -> Result<(), StoreError> {
        self.touched
            .borrow_mut()
            .worktrees
            .push((domain.clone(), key.to_owned()));
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM instances WHERE domain_id = ?1 AND worktree_key = ?2",
        )?;
        let ids = stmt.query_map(params![domain.as_str(), key], |r| r.get::<_, String>(0))?;
        for id in ids {
            if let Some(id) = berth_domain::ids::InstanceId::parse(&id?) {
                self.touch_instance(&id);
            }
        }
        Ok(())
    }
}
