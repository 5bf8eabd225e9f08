//! A rollout report as stored, and its view in the immutable-image contract's shape
//! (`berth_api::rollouts::RolloutReportView`).

use super::*;
use crate::evidence::MismatchReason;
use crate::time::Timestamp;

/// One reporter's latest report on a rollout in one of its sessions, as stored
/// ([`Tx::rollout_reports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutReport {
    /// The daemon's reporter id, or `<that id>/<placement>` for an instance the runtime placed
    /// (the node whose engine its evidence was read through).
    pub reporter_id: String,
    /// The daemon start that reported (with the placement, for a placed node's reporter).
    pub reporter_session_id: String,
    /// The placement (the node) it reported for; empty for the daemon's own host.
    pub node_name: String,
    /// How many reports of this reporter and session were recorded.
    pub report_sequence: i64,
    /// When the last one was.
    pub reported_at: Timestamp,
    /// Containers observed.
    pub observed: i64,
    /// Containers ready.
    pub healthy: i64,
    /// Containers verified.
    pub verified: i64,
    /// Containers failed.
    pub failed: i64,
    /// The reason it gave.
    pub mismatch_reason: Option<MismatchReason>,
}

impl RolloutReport {
    /// The report as the API shows it, on `rollout`.
    pub fn view(&self, rollout: &Rollout, site: &Site) -> RolloutReportView {
        let node = if self.node_name.is_empty() {
            site.node_name.clone()
        } else {
            self.node_name.clone()
        };
        RolloutReportView {
            reporter_id: self.reporter_id.clone(),
            reported_at: self.reported_at.millis(),
            envelope: RolloutReportEnvelope {
                rollout_id: rollout.id.clone(),
                rollout_generation: rollout.generation,
                reporter_session_id: self.reporter_session_id.clone(),
                report_sequence: self.report_sequence,
                reporter_capabilities: ReporterCapabilities {
                    immutable_image_deployment_version: 1,
                },
                reporter_node_ids: vec![node.clone()],
                reporter_node_names: vec![node],
            },
            observed_replica_count: self.observed,
            healthy_replica_count: self.healthy,
            verified_replica_count: self.verified,
            failed_replica_count: self.failed,
            mismatch_reason: self.mismatch_reason,
        }
    }
}
