//! The workspaces and leases tables.

use rusqlite::{OptionalExtension, Row, params};

use crate::error::StoreError;
use crate::tx::{Tx, from_json, to_json};
use berth_domain::ids::DomainId;
use berth_domain::model::{Lease, Workspace};
use berth_domain::time::Timestamp;

pub(super) fn workspace_from_row(row: &Row<'_>) -> rusqlite::Result<Workspace> {
    let containers: String = row.get(2)?;
    let domain: Option<String> = row.get(4)?;
    Ok(Workspace {
        id: row.get(0)?,
        owner: row.get(1)?,
        containers: from_json(&containers)?,
        selector: row.get(3)?,
        domain_id: domain
            .map(|d| DomainId::parse(&d).ok_or(rusqlite::Error::InvalidQuery))
            .transpose()?,
        worktree_key: row.get(5)?,
    })
}

pub(super) const WORKSPACE_COLUMNS: &str =
    "id, owner, containers, selector, domain_id, worktree_key";

impl Tx<'_> {
    /// One of `owner`'s workspaces by id: ids are per key.
    pub fn workspace(&self, owner: &str, id: &str) -> Result<Option<Workspace>, StoreError> {
        let sql =
            format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE owner = ?1 AND id = ?2");
        Ok(self
            .conn
            .query_row(&sql, [owner, id], workspace_from_row)
            .optional()?)
    }

    /// Every workspace `owner` registered, by id.
    pub fn workspaces_of(&self, owner: &str) -> Result<Vec<Workspace>, StoreError> {
        let sql =
            format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE owner = ?1 ORDER BY id");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([owner], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every workspace linked to a domain.
    pub fn linked_workspaces(&self, domain: &DomainId) -> Result<Vec<Workspace>, StoreError> {
        let sql = format!(
            "SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE domain_id = ?1 ORDER BY id, owner"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([domain.as_str()], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every linked workspace, across domains.
    pub fn all_linked_workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        let sql = format!(
            "SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE domain_id IS NOT NULL ORDER BY id, owner"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Creates or replaces a workspace's registration (its link is kept).
    pub fn put_workspace(&self, w: &Workspace) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO workspaces (id, owner, containers, selector, domain_id, worktree_key, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(owner, id) DO UPDATE SET containers = ?3, selector = ?4, domain_id = ?5, worktree_key = ?6",
            params![
                w.id,
                w.owner,
                to_json(&w.containers)?,
                w.selector,
                w.domain_id.as_ref().map(DomainId::as_str),
                w.worktree_key,
                Timestamp::now().millis(),
            ],
        )?;
        Ok(())
    }

    /// Deletes one of `owner`'s workspaces and its leases.
    pub fn delete_workspace(&self, owner: &str, id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM leases WHERE owner = ?1 AND workspace_id = ?2",
            [owner, id],
        )?;
        self.conn.execute(
            "DELETE FROM workspaces WHERE owner = ?1 AND id = ?2",
            [owner, id],
        )?;
        Ok(())
    }

    /// The leases of one of `owner`'s workspaces, soonest to expire first.
    pub fn leases(&self, owner: &str, workspace: &str) -> Result<Vec<Lease>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, owner, workspace_id, ttl_ms, expires_at FROM leases
             WHERE owner = ?1 AND workspace_id = ?2 ORDER BY expires_at, id",
        )?;
        let rows = stmt.query_map([owner, workspace], |r| {
            Ok(Lease {
                id: r.get(0)?,
                owner: r.get(1)?,
                workspace_id: r.get(2)?,
                ttl: std::time::Duration::from_millis(r.get::<_, i64>(3)?.max(0) as u64),
                expires_at: Timestamp::from_millis(r.get(4)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Creates or renews a lease.
    pub fn put_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO leases (id, owner, workspace_id, ttl_ms, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(id) DO UPDATE SET expires_at = ?5",
            params![
                lease.id,
                lease.owner,
                lease.workspace_id,
                lease.ttl.as_millis() as i64,
                lease.expires_at.millis()
            ],
        )?;
        Ok(())
    }

    /// Deletes a lease of one of `owner`'s workspaces; false when there was none.
    pub fn delete_lease(&self, owner: &str, workspace: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.conn.execute(
            "DELETE FROM leases WHERE owner = ?1 AND workspace_id = ?2 AND id = ?3",
            [owner, workspace, id],
        )? > 0)
    }

    /// Forgets leases that expired before `now`.
    pub fn delete_expired_leases(&self, now: Timestamp) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM leases WHERE expires_at <= ?1", [now.millis()])?)
    }
}
