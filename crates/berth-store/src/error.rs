//! How the store fails.

/// A store failure: the database could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("the store failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored row could not be read back.
    #[error("the store holds a row it cannot read: {0}")]
    Corrupt(String),
    /// The store's writer has stopped (the daemon is shutting down).
    #[error("the store is closed")]
    Closed,
    /// The database file failed its integrity check at open.
    #[error(
        "the database {path} is damaged ({detail}): stop berth, move the file aside (with its -wal \
         and -shm files) or restore it from a backup, then start berth again, which makes an \
         empty store if none is there"
    )]
    Damaged {
        /// The database file.
        path: String,
        /// What SQLite reported, its first problem only.
        detail: String,
    },
    /// The database file or its directory cannot be written.
    #[error(
        "the database {path} cannot be written (the file or its directory is read-only): give the \
         user berth runs as write access to both (e.g. `chmod u+w`), or choose another --data-dir"
    )]
    ReadOnly {
        /// The database file.
        path: String,
    },
}

/// What an error while opening a store means: damage, a refused write, or something else.
pub(super) fn classify_open_error(path: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Damaged {
            path: path.to_owned(),
            detail: e.to_string(),
        },
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
            StoreError::ReadOnly {
                path: path.to_owned(),
            }
        }
        _ => StoreError::Sqlite(e),
    }
}
