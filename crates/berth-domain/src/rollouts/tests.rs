use super::*;
use crate::evidence::{ImageEvidence, MismatchReason, VerificationStatus};
use crate::ids::InstanceId;
use crate::model::InstanceState;
use crate::time::Timestamp;

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn image() -> String {
    format!("127.0.0.1:5000/fixtures/busybox@sha256:{HEX}")
}

fn rollout(status: RolloutStatus, reason: Option<MismatchReason>, mode: RolloutMode) -> Rollout {
    let at = Timestamp::from_millis(1_700_000_000_000);
    Rollout {
        id: "rol:1".into(),
        instance_id: InstanceId::new(),
        generation: 1,
        mode,
        rollback_of: (mode == RolloutMode::Rollback).then(|| "rol:0".into()),
        release_id: "irl:1".into(),
        image: image(),
        spec_digest: "sha256:spec".into(),
        created_at: at,
        status,
        mismatch_reason: reason,
        observed: 0,
        healthy: 0,
        verified: 0,
        failed: 0,
        reporter_session: None,
        report_sequence: 0,
        reported_at: None,
        reported_reason: None,
        evidence: None,
        updated_at: at,
        instance_generation: 1,
    }
}

fn evidence(status: VerificationStatus, reason: Option<MismatchReason>) -> ImageEvidence {
    ImageEvidence {
        container_id: Some("c1".into()),
        container_image_id: Some(format!("sha256:{HEX}")),
        image_repo_digests: vec![image()],
        observed_at: Some(Timestamp::from_millis(1_700_000_000_001)),
        verification_status: status,
        mismatch_reason: reason,
        ..ImageEvidence::pending("sha256:spec", &image())
    }
}

/// The rollout as [`Tx::report`] leaves it after `report`.
fn apply(r: &Rollout, report: Report<'_>, stored: Option<&ImageEvidence>) -> Option<Rollout> {
    let next = r.after(report, stored)?;
    Some(Rollout {
        status: next.status,
        mismatch_reason: next.reason,
        observed: next.observed,
        healthy: next.healthy,
        verified: next.verified,
        failed: next.failed,
        reporter_session: Some("brs:1".into()),
        report_sequence: r.report_sequence + 1,
        reported_at: Some(Timestamp::from_millis(1_700_000_000_002)),
        reported_reason: next.reason,
        evidence: next.evidence.cloned().or_else(|| r.evidence.clone()),
        ..r.clone()
    })
}

fn site() -> Site {
    Site {
        reporter: Reporter {
            id: "brp:1".into(),
            session_id: "brs:1".into(),
        },
        node_name: "node".into(),
        report_deadline: REPORT_DEADLINE,
    }
}

/// The contract's `validateImageRolloutStatus`, over berth's own type.
fn validate(s: &RolloutStatusView) -> Vec<&'static str> {
    let mut errors = Vec::new();
    let safe = |n: i64| (0..=(1 << 53) - 1).contains(&n);
    let counts = |r: [i64; 5]| r.iter().all(|c| safe(*c));
    if !counts([
        s.required_replica_count,
        s.observed_replica_count,
        s.healthy_replica_count,
        s.verified_replica_count,
        s.failed_replica_count,
    ]) {
        errors.push("rollout replica counts must be non-negative safe integers");
    }
    for r in &s.reporters {
        if !counts([
            r.required_replica_count,
            r.observed_replica_count,
            r.healthy_replica_count,
            r.verified_replica_count,
            r.failed_replica_count,
        ]) {
            errors.push("reporter replica counts must be non-negative safe integers");
        }
        if r.rollout_id != s.rollout_id || r.rollout_generation != s.rollout_generation {
            errors.push("reporter rollout identity does not match aggregate rollout identity");
        }
        if r.observed_replica_count > r.required_replica_count
            || r.healthy_replica_count > r.observed_replica_count
            || r.verified_replica_count > r.observed_replica_count
        {
            errors.push("reporter replica counts are contradictory");
        }
    }
    if matches!(
        s.status,
        RolloutStatus::Succeeded | RolloutStatus::RolledBack
    ) {
        let req = s.required_replica_count;
        if req < 1
            || s.observed_replica_count != req
            || s.healthy_replica_count != req
            || s.verified_replica_count != req
            || s.failed_replica_count != 0
        {
            errors.push("successful rollout status requires every replica to be observed, healthy and verified");
        }
        if s.mismatch_reason.is_some() || s.reporters.is_empty() {
            errors.push("successful rollout status requires reporters without mismatch reasons");
        }
        for r in &s.reporters {
            if r.observed_replica_count != r.required_replica_count
                || r.healthy_replica_count != r.required_replica_count
                || r.verified_replica_count != r.required_replica_count
                || r.failed_replica_count != 0
                || r.mismatch_reason.is_some()
            {
                errors.push(
                    "successful rollout requires every reporter replica to be healthy and verified",
                );
            }
        }
        let sum = |f: fn(&ReporterStatus) -> i64| s.reporters.iter().map(f).sum::<i64>();
        if sum(|r| r.required_replica_count) != s.required_replica_count
            || sum(|r| r.observed_replica_count) != s.observed_replica_count
            || sum(|r| r.healthy_replica_count) != s.healthy_replica_count
            || sum(|r| r.verified_replica_count) != s.verified_replica_count
            || sum(|r| r.failed_replica_count) != s.failed_replica_count
        {
            errors.push(
                "successful rollout aggregate must exactly match successful reporter evidence",
            );
        }
    }
    errors
}

fn running() -> InstanceState {
    InstanceState::Running {
        since: Timestamp::from_millis(1),
    }
}

fn failed() -> InstanceState {
    InstanceState::Failed {
        at: Timestamp::from_millis(1),
        message: "no".into(),
    }
}

fn exited() -> InstanceState {
    InstanceState::Exited {
        at: Timestamp::from_millis(1),
        exit_code: Some(3),
    }
}

#[test]
fn a_rollout_goes_through_the_documented_table() {
    use MismatchReason::*;
    use RolloutStatus::*;
    let verified = evidence(VerificationStatus::Verified, None);
    let missing = evidence(VerificationStatus::Missing, Some(PullFailed));
    let mismatched = evidence(
        VerificationStatus::Mismatched,
        Some(RegistryDigestInconsistent),
    );
    let step = |r: &Rollout, report: Report<'_>| {
        apply(r, report, Some(&verified)).map(|n| (n.status, n.mismatch_reason))
    };
    let promotion = |s, reason| rollout(s, reason, RolloutMode::Promotion);
    let rollback = |s, reason| rollout(s, reason, RolloutMode::Rollback);

    assert_eq!(
        step(&promotion(Pending, None), Report::Acting),
        Some((Deploying, None))
    );
    assert_eq!(
        step(&rollback(Pending, None), Report::Acting),
        Some((RollingBack, None))
    );
    assert_eq!(step(&promotion(Deploying, None), Report::Acting), None);
    for from in [
        Pending,
        Deploying,
        RollingBack,
        Verifying,
        Failed,
        Mismatched,
    ] {
        let r = promotion(from, None);
        assert_eq!(
            step(&r, Report::Evidence(&verified)),
            Some((Verifying, None))
        );
        assert_eq!(
            step(&r, Report::Evidence(&missing)),
            Some((Failed, Some(PullFailed)))
        );
        assert_eq!(
            step(&r, Report::Evidence(&mismatched)),
            Some((Mismatched, Some(RegistryDigestInconsistent)))
        );
    }
    for from in [Pending, Deploying, Verifying] {
        assert_eq!(
            step(&promotion(from, None), Report::State(&running())),
            Some((Succeeded, None))
        );
        assert_eq!(
            step(&rollback(from, None), Report::State(&running())),
            Some((RolledBack, None))
        );
        assert_eq!(
            step(&promotion(from, None), Report::State(&failed())),
            Some((Failed, Some(ReplicaFailed)))
        );
        assert_eq!(
            step(&promotion(from, None), Report::State(&exited())),
            Some((Failed, Some(ReplicaUnhealthy)))
        );
    }
    // A crash loop stays unhealthy while its restarts verify, until it is ready.
    let unhealthy = promotion(Failed, Some(ReplicaUnhealthy));
    assert_eq!(
        step(&unhealthy, Report::Evidence(&verified)),
        Some((Failed, Some(ReplicaUnhealthy)))
    );
    assert_eq!(step(&unhealthy, Report::State(&exited())), None);
    assert_eq!(
        step(&unhealthy, Report::State(&running())),
        Some((Succeeded, None))
    );
    // A verdict reached by evidence is not overwritten by the instance's failure it causes.
    assert_eq!(
        step(
            &promotion(Failed, Some(PullFailed)),
            Report::State(&failed())
        ),
        None
    );
    // Running without verified evidence of the rollout's image proves nothing.
    assert_eq!(
        apply(&promotion(Verifying, None), Report::State(&running()), None).map(|r| r.status),
        None
    );
    // Evidence of another image is not about the rollout.
    let mut other = evidence(VerificationStatus::Verified, None);
    other.pinned_reference = format!("127.0.0.1:5000/fixtures/echo@sha256:{HEX}");
    assert_eq!(
        step(&promotion(Deploying, None), Report::Evidence(&other)),
        None
    );
    // Finished rollouts never change.
    for done in [promotion(Succeeded, None), rollback(RolledBack, None)] {
        for report in [
            Report::Acting,
            Report::Evidence(&missing),
            Report::State(&failed()),
            Report::State(&exited()),
        ] {
            assert_eq!(step(&done, report), None);
        }
    }
}

#[test]
fn every_status_a_report_leads_to_holds_the_contracts_validation() {
    use MismatchReason::*;
    use RolloutStatus::*;
    let verified = evidence(VerificationStatus::Verified, None);
    let evidences = [
        verified.clone(),
        evidence(VerificationStatus::Missing, Some(PullFailed)),
        evidence(VerificationStatus::Missing, Some(RequestedDigestMissing)),
        evidence(
            VerificationStatus::Mismatched,
            Some(ContainerRepodigestMismatch),
        ),
        evidence(
            VerificationStatus::Mismatched,
            Some(RegistryDigestInconsistent),
        ),
    ];
    let states = [running(), failed(), exited()];
    let mut seen = std::collections::BTreeSet::new();
    for mode in [
        RolloutMode::Promotion,
        RolloutMode::Automatic,
        RolloutMode::Rollback,
    ] {
        let mut frontier = vec![rollout(Pending, None, mode)];
        // Every sequence of up to four reports from `pending`.
        for _ in 0..4 {
            let mut next = Vec::new();
            for r in &frontier {
                let mut reports = vec![Report::Acting];
                reports.extend(evidences.iter().map(Report::Evidence));
                reports.extend(states.iter().map(Report::State));
                for report in reports {
                    if let Some(after) = apply(r, report, Some(&verified)) {
                        let view = after.status_at(&site(), &[], after.created_at);
                        assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
                        seen.insert(after.status.as_str());
                        next.push(after);
                    }
                }
            }
            frontier = next;
        }
    }
    let expected: std::collections::BTreeSet<&str> = [
        "deploying",
        "rolling-back",
        "verifying",
        "succeeded",
        "rolled-back",
        "failed",
        "mismatched",
    ]
    .into();
    assert_eq!(seen, expected);
    // The pending status before any report, and a superseded one, hold it too.
    let pending = rollout(Pending, None, RolloutMode::Promotion);
    assert!(validate(&pending.status_at(&site(), &[], pending.created_at)).is_empty());
    let superseded = rollout(Failed, Some(StaleRolloutReport), RolloutMode::Promotion);
    assert!(validate(&superseded.status_at(&site(), &[], superseded.created_at)).is_empty());
}

fn report_of(reporter: &str, session: &str, node: &str, at: i64) -> RolloutReport {
    RolloutReport {
        reporter_id: reporter.into(),
        reporter_session_id: session.into(),
        node_name: node.into(),
        report_sequence: 2,
        reported_at: Timestamp::from_millis(at),
        observed: 1,
        healthy: 1,
        verified: 1,
        failed: 0,
        mismatch_reason: None,
    }
}

#[test]
fn the_newest_session_of_each_reporter_is_aggregated_and_a_placed_node_reports_the_replica() {
    let mut r = rollout(RolloutStatus::Succeeded, None, RolloutMode::Promotion);
    (r.observed, r.healthy, r.verified) = (1, 1, 1);
    let at = r.created_at.millis();
    let mut acting = report_of("brp:1", "brs:old", "", at + 1);
    (acting.observed, acting.healthy, acting.verified) = (0, 0, 0);
    let mut old = report_of("brp:1/node-b", "brs:old", "node-b", at + 2);
    old.mismatch_reason = Some(MismatchReason::StaleRolloutReport);
    let reports = [
        acting,
        old,
        report_of("brp:1/node-b", "brs:new", "node-b", at + 3),
    ];
    let view = r.status_at(&site(), &reports, r.created_at);
    assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
    let listed: Vec<(&str, &str, &[String])> = view
        .reporters
        .iter()
        .map(|p| {
            (
                p.reporter_id.as_str(),
                p.reporter_session_id.as_str(),
                &p.reporter_node_names[..],
            )
        })
        .collect();
    let node_b = ["node-b".to_owned()];
    assert_eq!(listed, [("brp:1/node-b", "brs:new", &node_b[..])]);
    assert_eq!(view.reporters[0].mismatch_reason, None);

    // On one engine (no placement), the daemon's own report, named by the host.
    let own = [report_of("brp:1", "brs:new", "", at + 3)];
    let view = r.status_at(&site(), &own, r.created_at);
    assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
    assert_eq!(view.reporters[0].reporter_id, "brp:1");
    assert_eq!(view.reporters[0].reporter_node_names, ["node".to_owned()]);
}

#[test]
fn a_rollout_whose_replica_no_reporter_observed_by_the_deadline_is_required_replica_missing() {
    let deploying = rollout(RolloutStatus::Deploying, None, RolloutMode::Promotion);
    let site = site();
    let before = Timestamp::from_millis(
        deploying.created_at.millis() + site.report_deadline.as_millis() as i64 - 1,
    );
    let at = Timestamp::from_millis(
        deploying.created_at.millis() + site.report_deadline.as_millis() as i64,
    );
    let view = deploying.status_at(&site, &[], before);
    assert_eq!(view.status, RolloutStatus::Deploying);
    assert_eq!(view.mismatch_reason, None);
    let view = deploying.status_at(&site, &[], at);
    assert_eq!(view.status, RolloutStatus::Failed);
    assert_eq!(
        view.mismatch_reason,
        Some(MismatchReason::RequiredReplicaMissing)
    );
    assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
    // A replica observed (verifying) and a finished rollout are left as they are.
    let mut verifying = rollout(RolloutStatus::Verifying, None, RolloutMode::Promotion);
    (verifying.observed, verifying.verified) = (1, 1);
    assert_eq!(
        verifying.status_at(&site, &[], at).status,
        RolloutStatus::Verifying
    );
    let done = rollout(RolloutStatus::Succeeded, None, RolloutMode::Promotion);
    assert_eq!(
        done.status_at(&site, &[], at).status,
        RolloutStatus::Succeeded
    );
}
