//! A worktree key's record: where that worktree lives, its branch, and whether it has ended.
//! The CLI tells the daemon at each `up`; the daemon (core's worktree controller) watches the
//! path and, once the worktree is gone, stops the key's instances and offers them to `prune`.

pub use berth_api::worktrees::{
    MAX_BRANCH, MAX_WORKTREE_PATH, WorktreeList, WorktreeRequest, WorktreeView,
};

use crate::ids::DomainId;
use crate::time::Timestamp;

/// A worktree, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    pub domain_id: DomainId,
    pub key: String,
    pub path: String,
    pub branch: Option<String>,
    /// Whether the daemon saw the path when it was told of it.
    pub watched: bool,
    pub seen_at: Timestamp,
    pub ended_at: Option<Timestamp>,
}

impl Worktree {
    /// Its wire form.
    pub fn view(&self) -> WorktreeView {
        WorktreeView {
            worktree_key: self.key.clone(),
            path: self.path.clone(),
            branch: self.branch.clone(),
            watched: self.watched,
            seen_at: self.seen_at,
            ended_at: self.ended_at,
        }
    }
}

/// What a worktree request must be, or the problem with its field: the path absolute and
/// at most [`MAX_WORKTREE_PATH`] bytes, with no NUL or control character; the branch 1 to
/// [`MAX_BRANCH`] bytes with no control character. Never quotes the value.
pub fn check_request(request: &WorktreeRequest) -> Result<(), (&'static str, String)> {
    let path = &request.path;
    if !path.starts_with('/')
        || path.len() > MAX_WORKTREE_PATH
        || path.chars().any(char::is_control)
    {
        return Err((
            "body.path",
            format!(
                "must be an absolute path of at most {MAX_WORKTREE_PATH} bytes with no control \
                 character"
            ),
        ));
    }
    if let Some(branch) = &request.branch
        && (branch.is_empty() || branch.len() > MAX_BRANCH || branch.chars().any(char::is_control))
    {
        return Err((
            "body.branch",
            format!("must be null or 1 to {MAX_BRANCH} bytes with no control character"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, branch: Option<&str>) -> WorktreeRequest {
        WorktreeRequest {
            path: path.to_owned(),
            branch: branch.map(str::to_owned),
        }
    }

    #[test]
    fn a_request_names_the_field_it_refuses() {
        assert!(check_request(&request("/home/a/repo", Some("main"))).is_ok());
        assert!(check_request(&request("/home/a/repo", None)).is_ok());
        assert_eq!(
            check_request(&request("repo", None)).unwrap_err().0,
            "body.path"
        );
        assert_eq!(
            check_request(&request("/a\nb", None)).unwrap_err().0,
            "body.path"
        );
        let long = format!("/{}", "a".repeat(MAX_WORKTREE_PATH));
        assert_eq!(
            check_request(&request(&long, None)).unwrap_err().0,
            "body.path"
        );
        assert_eq!(
            check_request(&request("/a", Some(""))).unwrap_err().0,
            "body.branch"
        );
        assert_eq!(
            check_request(&request("/a", Some("x\u{1b}[2J")))
                .unwrap_err()
                .0,
            "body.branch"
        );
    }
}
