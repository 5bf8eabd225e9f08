//! What the engine is asked for an instance: its endpoints, its volumes, its logs, an exec;
//! and the daemon's own view.

use super::Berth;
use crate::controllers::Reconciler;
use crate::controllers::sizes::volume_sizes;
use crate::error::Error;
use crate::exec::{ExecFrame, ExecResult, MAX_OUTPUT_BYTES};
use crate::ids::DomainId;
use crate::model::{
    DaemonView, Desired, EngineView, HeldVolume, HoldersView, InstanceState, KeptVolume,
    OtherStoreView, UnheldVolume,
};
use crate::names;
use crate::runtime::{ExecRequest, ExecStdin, RuntimeError};
use crate::snapshots::CopyMethod;

impl Berth {
    /// The reconciler, when its engine answers now: what needs the engine (an exec, logs, an
    /// archive) is refused at once while it does not, rather than waiting on it.
    pub(crate) fn require_engine(&self) -> Result<&Reconciler, Error> {
        let reconciler = self.require_runtime()?;
        match reconciler.engine_unreachable() {
            None => Ok(reconciler),
            Some(away) => Err(Error::EngineUnreachable {
                since: away.since,
                message: away.message,
            }),
        }
    }

    /// `None` while the daemon's container engine answers (or it runs none); since when and
    /// why it does not, otherwise.
    pub fn engine_unreachable(&self) -> Option<crate::model::EngineUnreachable> {
        self.reconciler
            .as_ref()
            .and_then(Reconciler::engine_unreachable)
    }

    /// Sees each change of [`Berth::engine_unreachable`]; `None` without a runtime.
    pub fn engine_changes(
        &self,
    ) -> Option<tokio::sync::watch::Receiver<Option<crate::model::EngineUnreachable>>> {
        self.reconciler.as_ref().map(Reconciler::engine_changes)
    }

    /// An instance's host endpoints: a loopback port per service port, stable for its life.
    pub async fn endpoints(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<crate::controllers::endpoints::EndpointView>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        Ok(reconciler.endpoints_of(&instance.id).await?)
    }

    /// Every volume an instance keeps, one per name: those it mounts and those a spec change
    /// dropped (which a later `up` naming them mounts again), each measured.
    pub async fn volumes(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<KeptVolume>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        let names: Vec<String> = instance
            .kept
            .iter()
            .map(|v| v.docker_name.clone())
            .collect();
        let sizes = volume_sizes(self.store(), reconciler.runtime().as_ref(), &names)
            .await
            .unwrap_or_default();
        Ok(instance
            .kept
            .iter()
            .map(|v| KeptVolume {
                name: v.name.clone(),
                docker_name: v.docker_name.clone(),
                mounted: instance.volumes.iter().any(|m| m.name == v.name),
                bytes: sizes
                    .get(&v.docker_name)
                    .copied()
                    .flatten()
                    .and_then(|b| i64::try_from(b).ok()),
            })
            .collect())
    }

    /// This daemon's store (its id and data directory) and what the engine holds of other
    /// stores under its prefix, at the reconciler's last look.
    pub fn daemon(&self) -> DaemonView {
        let identity = self.store().identity();
        DaemonView {
            store_id: identity.id.clone(),
            data_dir: identity.data_dir.clone(),
            prefix: self.reconciler.as_ref().map(|r| r.config().prefix.clone()),
            other_stores: self
                .reconciler
                .as_ref()
                .map(|r| r.other_stores())
                .unwrap_or_default()
                .into_iter()
                .map(|o| OtherStoreView {
                    store_id: o.store,
                    containers: o.containers,
                    data_dir: o.data_dir,
                })
                .collect(),
            holders: self
                .reconciler
                .as_ref()
                .and_then(|r| r.holdings())
                .map(|h| HoldersView {
                    held: h
                        .held
                        .into_iter()
                        .map(|(volume, holder)| HeldVolume { volume, holder })
                        .collect(),
                    unheld: h
                        .unheld
                        .into_iter()
                        .map(|(volume, reason)| UnheldVolume { volume, reason })
                        .collect(),
                }),
            volume_layers: self
                .reconciler
                .as_ref()
                .and_then(|r| r.overlay_volumes())
                .map(|overlay| {
                    if overlay {
                        CopyMethod::Overlay
                    } else {
                        CopyMethod::Copy
                    }
                }),
            engine: self.reconciler.as_ref().map(|r| {
                let unreachable = r.engine_unreachable();
                EngineView {
                    runtime: r.runtime().kind().to_owned(),
                    reachable: unreachable.is_none(),
                    unreachable,
                }
            }),
        }
    }

    /// An instance's container output: its last `tail` lines, then with `follow` what it writes
    /// next. Nothing of it is logged or stored by berth.
    pub async fn logs(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        tail: Option<u64>,
        follow: bool,
    ) -> Result<crate::runtime::LogStream, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_engine()?;
        let name = names::container(&reconciler.config().prefix, domain_id, key);
        let exists = reconciler
            .runtime()
            .inspect_container(&name)
            .await
            .map_err(|e| Error::Runtime(e.to_string()))?
            .is_some();
        if !exists {
            return Err(Error::InstanceNotRunning {
                key: key.to_owned(),
                state: format!("{}, with no container to read from", instance.state.kind()),
            });
        }
        Ok(reconciler.runtime().logs(&name, tail, follow))
    }

    /// Runs a command in a running instance, streaming `stdin` into it. Nothing about the run
    /// (argv, stdin, output) is logged or stored. When `cancel` fires (the caller went away,
    /// berth is stopping) or `stdin` fails to read, the command is killed in its container at
    /// once and the exec answers an error saying so.
    pub async fn exec(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        frame: ExecFrame,
        stdin: ExecStdin,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ExecResult, Error> {
        let (runtime, container) = self.running_container(owner, domain_id, key).await?;
        let not_running = |state: &str| Error::InstanceNotRunning {
            key: key.to_owned(),
            state: state.to_owned(),
        };
        let request = ExecRequest {
            argv: frame.argv,
            user: frame.user,
            timeout: std::time::Duration::from_millis(frame.timeout_ms as u64),
            max_output: MAX_OUTPUT_BYTES,
            cancel,
        };
        let outcome = match runtime.exec(&container.id, request, stdin).await {
            Ok(outcome) => outcome,
            Err(RuntimeError::Cancelled(message)) => return Err(Error::Runtime(message)),
            Err(e) => {
                // The container may have stopped between the check above and the exec (a stop,
                // an idle stop, an exit): the engine says so in several ways, so look again.
                // Running now, but started again since: it stopped in between all the same.
                let still_running = runtime
                    .inspect_container(&container.id)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|c| c.running && c.started_at == container.started_at);
                return Err(if still_running {
                    Error::Runtime(format!("the command could not be run: {e}"))
                } else {
                    not_running("it stopped as the command began")
                });
            }
        };
        Ok(ExecResult {
            exit_code: outcome.exit_code,
            stdout: String::from_utf8_lossy(&outcome.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&outcome.stderr).into_owned(),
            truncated: outcome.truncated,
            timed_out: outcome.timed_out,
        })
    }

    /// Starts `argv` on a terminal of `size` (columns, rows) in a running instance, waking it
    /// as an exec does. Nothing about the run is logged or stored.
    pub async fn exec_tty(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        argv: Vec<String>,
        user: Option<String>,
        size: (u16, u16),
    ) -> Result<crate::runtime::TtySession, Error> {
        let (runtime, container) = self.running_container(owner, domain_id, key).await?;
        let request = crate::runtime::TtyRequest { argv, user, size };
        runtime
            .exec_tty(&container.id, request)
            .await
            .map_err(|e| Error::Runtime(format!("the command could not be run: {e}")))
    }

    /// The running container of an instance a command may run in: one idleness stopped is woken,
    /// one starting waited for and a frozen one thawed, as a connection to its endpoints does;
    /// a person's stop is kept.
    async fn running_container(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<
        (
            std::sync::Arc<dyn crate::runtime::Runtime>,
            crate::runtime::ContainerFacts,
        ),
        Error,
    > {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_engine()?;
        let not_running = |state: &str| Error::InstanceNotRunning {
            key: key.to_owned(),
            state: state.to_owned(),
        };
        // Idleness stopped it (or it is starting): an exec wakes it and waits for it, as a
        // connection to one of its endpoints does. A person's stop is kept.
        let idle = instance.desired == Desired::Stopped
            && matches!(instance.stop_reason, Some(crate::model::StopReason::Idle));
        let instance = if idle
            || (instance.desired == Desired::Running
                && matches!(instance.state, InstanceState::Starting { .. }))
        {
            match reconciler.ready_for_use(&instance.id).await {
                Some(running) => running,
                None => {
                    let now = self.instance(owner, domain_id, key)?;
                    return Err(not_running(now.state.kind()));
                }
            }
        } else {
            instance
        };
        if !matches!(instance.state, InstanceState::Running { .. })
            || instance.desired != Desired::Running
        {
            return Err(not_running(instance.state.kind()));
        }
        // A frozen instance is thawed for the command (and its idle clocks restart).
        reconciler
            .thaw(&instance.id)
            .await
            .map_err(|e| Error::Runtime(e.to_string()))?;
        let runtime = reconciler.runtime();
        let name = names::container(&reconciler.config().prefix, domain_id, key);
        let container = runtime
            .inspect_container(&name)
            .await
            .map_err(|e| Error::Runtime(e.to_string()))?
            .filter(|c| c.running)
            .ok_or_else(|| not_running("its container is not running"))?;
        Ok((runtime.clone(), container))
    }
}
