//! The schema, one migration at a time, and the check every open runs.

use rusqlite::Connection;

use crate::StoreError;
use crate::error::classify_open_error;

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: domains and instances.
    "CREATE TABLE domains (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        owner TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX domains_by_owner ON domains(owner, created_at);
    CREATE TABLE instances (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        key TEXT NOT NULL,
        alias TEXT NOT NULL,
        worktree_key TEXT,
        spec TEXT NOT NULL,
        spec_digest TEXT NOT NULL,
        desired TEXT NOT NULL,
        stop_reason TEXT,
        state TEXT NOT NULL,
        observed_at INTEGER NOT NULL,
        started_at INTEGER,
        last_reached_at INTEGER,
        volumes TEXT NOT NULL,
        restart_count INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        UNIQUE (domain_id, key)
    );
    -- At most one live instance answers to an alias for one worktree key of a domain.
    CREATE UNIQUE INDEX instances_alias ON instances(domain_id, alias, coalesce(worktree_key, ''))
        WHERE desired != 'archived';",
    // 2: workspaces, their links and leases.
    "CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        containers TEXT NOT NULL,
        selector TEXT,
        domain_id TEXT REFERENCES domains(id),
        worktree_key TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX workspaces_by_domain ON workspaces(domain_id, worktree_key);
    CREATE TABLE leases (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        ttl_ms INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );
    CREATE INDEX leases_by_workspace ON leases(workspace_id, expires_at);",
    // 3: host endpoints: one loopback port per service port of an instance, kept for its life.
    "CREATE TABLE endpoints (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        port INTEGER NOT NULL,
        host_port INTEGER NOT NULL UNIQUE,
        PRIMARY KEY (instance_id, port)
    );",
    // 4: image evidence, release history and rollback idempotency keys.
    "CREATE TABLE image_evidence (
        instance_id TEXT PRIMARY KEY REFERENCES instances(id),
        evidence TEXT NOT NULL
    );
    CREATE TABLE releases (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        seq INTEGER NOT NULL,
        spec_digest TEXT NOT NULL,
        spec TEXT NOT NULL,
        image TEXT NOT NULL,
        image_digest TEXT NOT NULL,
        first_started_at INTEGER NOT NULL,
        last_started_at INTEGER NOT NULL,
        ended TEXT,
        ended_at INTEGER,
        PRIMARY KEY (instance_id, seq)
    );
    CREATE TABLE rollbacks (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        idempotency_key TEXT NOT NULL,
        expected_spec_digest TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (instance_id, idempotency_key)
    );",
    // 5: workspace ids are per key: a workspace is (owner, id), and so are its leases' references.
    // Existing rows keep their owner; leases take their workspace's.
    "CREATE TABLE workspaces_v5 (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        containers TEXT NOT NULL,
        selector TEXT,
        domain_id TEXT REFERENCES domains(id),
        worktree_key TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (owner, id)
    );
    INSERT INTO workspaces_v5 (owner, id, containers, selector, domain_id, worktree_key, created_at)
        SELECT owner, id, containers, selector, domain_id, worktree_key, created_at FROM workspaces;
    CREATE TABLE leases_v5 (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        ttl_ms INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        FOREIGN KEY (owner, workspace_id) REFERENCES workspaces_v5(owner, id) ON DELETE CASCADE
    );
    INSERT INTO leases_v5 (id, owner, workspace_id, ttl_ms, expires_at)
        SELECT l.id, w.owner, l.workspace_id, l.ttl_ms, l.expires_at
        FROM leases l JOIN workspaces w ON w.id = l.workspace_id;
    DROP TABLE leases;
    DROP TABLE workspaces;
    ALTER TABLE workspaces_v5 RENAME TO workspaces;
    ALTER TABLE leases_v5 RENAME TO leases;
    CREATE INDEX workspaces_by_domain ON workspaces(domain_id, worktree_key);
    CREATE INDEX leases_by_workspace ON leases(owner, workspace_id, expires_at);",
    // 6: generations: what is desired is numbered, and so is what the reconciler last acted on.
    // An existing instance starts at generation 1, observed if it was ever observed running.
    "ALTER TABLE instances ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE instances ADD COLUMN observed_generation INTEGER NOT NULL DEFAULT 0;
    UPDATE instances SET observed_generation = 1 WHERE state NOT LIKE '%not-started%';",
    // 7: image rollouts (one per change of an instance's image, numbered per instance), the
    // image releases berth observed, and this daemon's stable reporter identity.
    "CREATE TABLE rollouts (
        id TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL REFERENCES instances(id),
        generation INTEGER NOT NULL,
        mode TEXT NOT NULL,
        rollback_of TEXT,
        release_id TEXT NOT NULL,
        image TEXT NOT NULL,
        spec_digest TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        mismatch_reason TEXT,
        observed INTEGER NOT NULL DEFAULT 0,
        healthy INTEGER NOT NULL DEFAULT 0,
        verified INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        reporter_session TEXT,
        report_sequence INTEGER NOT NULL DEFAULT 0,
        reported_at INTEGER,
        evidence TEXT,
        updated_at INTEGER NOT NULL,
        UNIQUE (instance_id, generation)
    );
    CREATE TABLE image_releases (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        id TEXT NOT NULL,
        registry_host TEXT NOT NULL,
        repository TEXT NOT NULL,
        root_digest TEXT NOT NULL,
        media_type TEXT,
        tags TEXT NOT NULL,
        first_observed_at INTEGER NOT NULL,
        last_observed_at INTEGER NOT NULL,
        observation_count INTEGER NOT NULL,
        accepted_at INTEGER,
        PRIMARY KEY (instance_id, id)
    );
    CREATE TABLE reporter (
        id TEXT PRIMARY KEY
    );",
    // 8: a rollout remembers the generation of the desired state that wrote it (a report from
    // a reconcile of an older one is stale) and the reason of the reporter's last report; an
    // image release of an index, the manifest it lists for the engine's platform.
    "ALTER TABLE rollouts ADD COLUMN instance_generation INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rollouts ADD COLUMN reported_reason TEXT;
    ALTER TABLE image_releases ADD COLUMN platform_manifest_digest TEXT;
    ALTER TABLE image_releases ADD COLUMN platform_config_digest TEXT;",
    // 9: snapshots of instance volumes and the copy operations (snapshot, branch, restore),
    // each recorded as intent before it starts; an instance a branch or a restore filled mounts
    // volumes whose names carry the copy's tag.
    "ALTER TABLE instances ADD COLUMN volume_tag TEXT;
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        instance_id TEXT NOT NULL REFERENCES instances(id),
        instance_key TEXT NOT NULL,
        name TEXT NOT NULL,
        spec_digest TEXT NOT NULL,
        image TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        state TEXT NOT NULL,
        message TEXT,
        volumes TEXT NOT NULL,
        source_paused_ms INTEGER
    );
    CREATE INDEX snapshots_by_domain ON snapshots(domain_id, created_at);
    CREATE TABLE copies (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        kind TEXT NOT NULL,
        source_instance_id TEXT,
        target_instance_id TEXT,
        snapshot_id TEXT,
        backup_snapshot_id TEXT,
        tag TEXT,
        state TEXT NOT NULL,
        message TEXT,
        bytes_done INTEGER NOT NULL DEFAULT 0,
        bytes_total INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX copies_by_state ON copies(state);",
    // 10: an instance keeps its last failure's message and time after it recovers.
    "ALTER TABLE instances ADD COLUMN last_failure_message TEXT;
    ALTER TABLE instances ADD COLUMN last_failure_at INTEGER;",
    // 11: where the runtime placed an instance (the swarm runtime's node): an opaque value the
    // runtime chose once, handed back to it on every later call for the instance.
    //     Also each reporter's latest report on a rollout, one row per reporter and session (a
    //     reporter per placement: the node whose engine the evidence was read through).
    "CREATE TABLE instance_placements (
        instance_id TEXT PRIMARY KEY REFERENCES instances(id),
        placement TEXT NOT NULL
    );
    CREATE TABLE rollout_reports (
        rollout_id TEXT NOT NULL REFERENCES rollouts(id),
        reporter_id TEXT NOT NULL,
        reporter_session_id TEXT NOT NULL,
        node_name TEXT NOT NULL,
        report_sequence INTEGER NOT NULL,
        reported_at INTEGER NOT NULL,
        observed INTEGER NOT NULL,
        healthy INTEGER NOT NULL,
        verified INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        mismatch_reason TEXT,
        PRIMARY KEY (rollout_id, reporter_id, reporter_session_id)
    );",
    // 12: the store's identity, written once when the store is made (or first opened by a
    // berth that labels its objects with it): every engine object its daemon makes carries it.
    "CREATE TABLE store_identity (id TEXT PRIMARY KEY);",
    // 13: every volume an instance has had, by name: what it mounts and what spec changes
    // dropped, so a name that comes back mounts the same data and snapshots, restores,
    // branches and archive reach it.
    "ALTER TABLE instances ADD COLUMN kept_volumes TEXT NOT NULL DEFAULT '[]';
    UPDATE instances SET kept_volumes = volumes;",
    // 14: overlay volumes and the layers under them (a volume's data, or an overlay's upper
    // layer), top first, as JSON; and how each copy filled its volumes.
    "CREATE TABLE layered_volumes (
        volume TEXT PRIMARY KEY,
        upper TEXT NOT NULL,
        lowers TEXT NOT NULL
    );
    ALTER TABLE copies ADD COLUMN method TEXT NOT NULL DEFAULT 'copy';",
    // 15: templates, the bases a fresh instance may start on (one per domain and recipe: the
    // image digest, command, environment and volume paths), and which instances asked for one.
    "ALTER TABLE instances ADD COLUMN template INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE templates (
        id TEXT NOT NULL,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        recipe TEXT NOT NULL,
        image TEXT NOT NULL,
        state TEXT NOT NULL,
        volumes TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        ready_at INTEGER,
        build_ms INTEGER,
        PRIMARY KEY (domain_id, id)
    );",
    // 16: host ports stay with an instance's name: the host port each service port of an
    // archived instance had, by domain and key lineage (the key without its generation
    // suffix), for the next instance of that lineage; and the port an endpoint was meant to
    // have when that one was taken.
    "CREATE TABLE released_endpoints (
        domain_id TEXT NOT NULL,
        lineage TEXT NOT NULL,
        port INTEGER NOT NULL,
        host_port INTEGER NOT NULL,
        PRIMARY KEY (domain_id, lineage, port)
    );
    ALTER TABLE endpoints ADD COLUMN wanted_host_port INTEGER;",
    // 17: promotions of observed image releases, kept under their idempotency key with the
    // request they answered (a replay with another body is refused).
    "CREATE TABLE promotions (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        idempotency_key TEXT NOT NULL,
        request TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (instance_id, idempotency_key)
    );",
    // 18: the plain volumes berth has made for instances (and found made since): one of them
    // the engine no longer has was removed outside berth, and its instance is failed naming it
    // instead of started on an empty one.
    "CREATE TABLE made_volumes (
        volume TEXT PRIMARY KEY,
        made_at INTEGER NOT NULL
    );",
    // 19: worktrees: where each worktree key of a domain lives and its branch, as the CLI told
    // at `up`; whether the daemon can see that path; when it found the worktree gone.
    "CREATE TABLE worktrees (
        domain_id TEXT NOT NULL REFERENCES domains(id),
        key TEXT NOT NULL,
        path TEXT NOT NULL,
        branch TEXT,
        watched INTEGER NOT NULL,
        seen_at INTEGER NOT NULL,
        ended_at INTEGER,
        PRIMARY KEY (domain_id, key)
    );",
    // 20: since when an instance's running container is frozen (the cgroup freezer), while it
    // is: the view says so, and a connection to its endpoints thaws it.
    "ALTER TABLE instances ADD COLUMN frozen_at INTEGER;",
    // 21: pools of instances made ahead of time from a template or a snapshot (one per domain
    // and name), the instances each has made (waiting, leased, released or removed), and the
    // leases that hold them, each the service key's that took it, released when its time to
    // live runs out.
    "CREATE TABLE pools (
        domain_id TEXT NOT NULL REFERENCES domains(id),
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        source TEXT NOT NULL,
        size INTEGER NOT NULL,
        deleting INTEGER NOT NULL DEFAULT 0,
        message TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (domain_id, name)
    );
    CREATE TABLE pool_instances (
        instance_id TEXT PRIMARY KEY REFERENCES instances(id),
        domain_id TEXT NOT NULL REFERENCES domains(id),
        pool TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX pool_instances_by_pool ON pool_instances (domain_id, pool, state);
    CREATE TABLE pool_leases (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        pool TEXT NOT NULL,
        key TEXT NOT NULL,
        instance_id TEXT NOT NULL REFERENCES instances(id),
        ttl_ms INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        resets INTEGER NOT NULL DEFAULT 0
    );",
    // 22: the layers of snapshots deleted while other volumes stood on them, kept until nothing
    // does (a prune then frees them).
    "CREATE TABLE kept_layers (
        snapshot_id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        name TEXT NOT NULL,
        instance_key TEXT NOT NULL,
        deleted_at INTEGER NOT NULL,
        volumes TEXT NOT NULL
    );
    CREATE INDEX kept_layers_by_domain ON kept_layers (domain_id);",
];

/// Runs `PRAGMA quick_check` (every page and index, without comparing index contents to their
/// tables: fast enough for every start) and refuses a store that fails it.
pub(super) fn quick_check(conn: &Connection, path: &str) -> Result<(), StoreError> {
    let mut problems = Vec::new();
    let result = conn.prepare("PRAGMA quick_check").and_then(|mut stmt| {
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        for row in rows {
            problems.push(row?);
        }
        Ok(())
    });
    if let Err(e) = result {
        return Err(classify_open_error(path, e));
    }
    match problems.first() {
        Some(first) if first == "ok" && problems.len() == 1 => Ok(()),
        Some(first) => Err(StoreError::Damaged {
            path: path.to_owned(),
            detail: format!("quick_check: {first}"),
        }),
        None => Err(StoreError::Damaged {
            path: path.to_owned(),
            detail: "quick_check said nothing".to_owned(),
        }),
    }
}
