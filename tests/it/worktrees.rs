//! Worktrees that end: the CLI tells the daemon where each worktree lives at `up`; once `git
//! worktree remove` takes one, the daemon notices, stops its instances and says why in the
//! view, `ps` and `doctor`, while the other worktrees' instances run on.

use std::time::Duration;

use serde_json::Value;
use support::Daemon;

use crate::cli::{berth, git, repo};
use berth_testkit as support;

const READY: Duration = Duration::from_secs(120);

/// One worktree-scoped instance with no volume: the fixture busybox.
fn one_instance() -> String {
    format!(
        r#"[instances.db]
image = "{}"
scope = "worktree"
ready = {{ tcp = 8080 }}
"#,
        support::busybox_image()
    )
}

fn only_key(items: &Value) -> String {
    let items = items.as_array().expect("an array");
    assert_eq!(items.len(), 1, "{items:#?}");
    items[0]["key"].as_str().unwrap().to_owned()
}

#[test]
fn a_removed_worktree_is_noticed_its_instances_stopped_and_named_by_ps_and_doctor() {
    let daemon = Daemon::start();
    let repo = repo(&one_instance());
    let main_key = only_key(&berth(&daemon, &repo.main, &["up", "--json"]).ok().json());
    let second_key = only_key(&berth(&daemon, &repo.second, &["up", "--json"]).ok().json());

    // Each `up` told the daemon its worktree's path and branch.
    let api = daemon.client();
    let domain = api.get("/v1/resource-domains").expect(200)["items"][0]["resourceDomainId"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = support::domain_id(&domain);
    let trees = support::block_on(api.api().worktrees(&id)).expect("the worktrees");
    assert_eq!(trees.len(), 2, "{trees:#?}");
    let second = trees
        .iter()
        .find(|t| t.path == repo.second.to_string_lossy())
        .unwrap_or_else(|| panic!("no record of {}: {trees:#?}", repo.second.display()));
    assert_eq!(second.branch.as_deref(), Some("shop-feature"));
    assert!(second.watched && second.ended_at.is_none(), "{second:?}");
    let view = api.instance(&domain, &second_key);
    assert_eq!(view["worktree"]["branch"], "shop-feature", "{view:#}");

    // `git worktree remove` takes the directory; the daemon notices by itself.
    git(
        &repo.main,
        &[
            "worktree",
            "remove",
            "--force",
            repo.second.to_str().unwrap(),
        ],
    );
    let stopped = api.wait_state(&domain, &second_key, "stopped", READY);
    assert_eq!(
        stopped["stopReason"],
        serde_json::json!({"kind": "person", "by": "berth: its worktree was removed"}),
        "{stopped:#}"
    );
    assert!(stopped["worktree"]["endedAt"].is_string(), "{stopped:#}");
    // Main's instance runs on, its worktree live.
    let main = api.instance(&domain, &main_key);
    assert_eq!(main["state"]["kind"], "running", "{main:#}");
    assert!(main["worktree"]["endedAt"].is_null(), "{main:#}");

    // `ps` from main names the removed worktree and what ends its instance; `doctor` fails
    // its worktrees line naming the key.
    let ps = berth(&daemon, &repo.main, &["ps"]).ok();
    let line = ps
        .stdout
        .lines()
        .find(|l| l.contains(&second_key))
        .unwrap_or_else(|| panic!("no row for {second_key}: {ps:?}"));
    assert!(
        line.contains("worktree shop-feature")
            && line.contains("was removed")
            && line.contains("berth prune"),
        "{line}"
    );
    let doctor = berth(&daemon, &repo.main, &["doctor", "--json"]);
    assert_ne!(doctor.code, 0, "{doctor:?}");
    let checks = doctor.json();
    let worktrees = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "worktrees")
        .unwrap_or_else(|| panic!("no worktrees check: {checks:#}"));
    assert_eq!(worktrees["ok"], false, "{worktrees:#}");
    assert!(
        worktrees["detail"].as_str().unwrap().contains(&second_key),
        "{worktrees:#}"
    );
}

#[test]
fn a_worktree_path_is_refused_by_name_and_an_unseen_one_is_never_ended() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("worktree-records");
    let id = support::domain_id(&domain);
    let put = |key: &str, path: &str, branch: Option<&str>| {
        support::block_on(api.api().put_worktree(
            &id,
            key,
            &berth_client::WorktreeRequest {
                path: path.to_owned(),
                branch: branch.map(str::to_owned),
            },
        ))
    };
    for (path, branch, field) in [
        ("relative/path", None, "body.path"),
        ("/a\u{7}b", None, "body.path"),
        ("/repo", Some(""), "body.branch"),
    ] {
        let err = put("wt-1", path, branch).expect_err("refused");
        assert!(err.is("RequestRefusedError"), "{err:?}");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    let err = put("-bad", "/repo", None).expect_err("a bad key");
    assert!(err.to_string().contains("path.worktreeKey"), "{err}");
    assert!(
        support::block_on(api.api().worktrees(&id))
            .unwrap()
            .is_empty(),
        "a refused request wrote nothing"
    );

    // A path the daemon cannot see (a CLI on another host) is kept, never watched, never ended.
    let unseen = put("wt-2", "/nowhere/berth-test/repo", Some("main")).expect("recorded");
    assert!(!unseen.watched && unseen.ended_at.is_none(), "{unseen:?}");
    let again = put("wt-2", "/nowhere/berth-test/repo", Some("next")).expect("told again");
    assert_eq!(again.branch.as_deref(), Some("next"));
    let trees = support::block_on(api.api().worktrees(&id)).unwrap();
    assert_eq!(trees, vec![again]);
}
