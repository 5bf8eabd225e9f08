//! Which capability each route needs, the check before every `/v1` route, and the mark on
//! each operation of the OpenAPI document (`x-berth-capability`).
//!
//! The table below is the one place a route's capability is declared. A route the table does
//! not name answers only keys without grants (it fails closed), and the suite's table-driven
//! test over the OpenAPI document fails for it, so a new route cannot ship without a line here.
//! The check runs after the key is known and before the handler, so a refusal says nothing
//! about whether the domain or instance it names exists.

use axum::RequestPartsExt;
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use berth_api::capabilities::Capability;
use berth_api::ids::DomainId;
use utoipa::openapi::OpenApi;
use utoipa::openapi::extensions::Extensions;

use crate::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::grants::DomainRef;

/// What a route needs beyond a known key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: any key (who am I, signing the web page out).
    Nothing,
    /// This capability, in the route's domain when it names one.
    Capability(Capability),
}

impl Needs {
    /// The document's mark: the capability's wire name, or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Needs::Nothing => "none",
            Needs::Capability(c) => c.as_str(),
        }
    }
}

use Capability::*;

const D: &str = "/v1/resource-domains/{resourceDomainId}";
const I: &str = "/v1/resource-domains/{resourceDomainId}/instances/{key}";

/// Every `/v1` route that takes a key, with what it needs. The path is the route's template
/// without the domain or instance prefix it starts with (`D` or `I` above), to keep the table
/// readable.
const TABLE: &[(&str, &str, &str, Needs)] = &[
    // Meta and the web page.
    ("GET", "", "/v1/daemon", Needs::Capability(Read)),
    ("GET", "", "/v1/openapi.json", Needs::Capability(Read)),
    ("GET", "", "/v1/whoami", Needs::Nothing),
    ("POST", "", "/v1/ui/sign-in-links", Needs::Capability(Read)),
    ("DELETE", "", "/v1/ui/sessions/current", Needs::Nothing),
    // Domains.
    ("GET", "", "/v1/resource-domains", Needs::Capability(Read)),
    (
        "POST",
        "",
        "/v1/resource-domains",
        Needs::Capability(DomainsCreate),
    ),
    ("GET", D, "", Needs::Capability(Read)),
    ("POST", D, "/archive", Needs::Capability(InstancesArchive)),
    ("GET", D, "/events", Needs::Capability(Read)),
    ("POST", D, "/fence", Needs::Capability(InstancesLifecycle)),
    ("POST", D, "/unfence", Needs::Capability(InstancesLifecycle)),
    ("GET", D, "/instances", Needs::Capability(Read)),
    ("GET", D, "/summary", Needs::Capability(Read)),
    ("GET", D, "/volume-usage", Needs::Capability(Read)),
    ("GET", D, "/snapshots", Needs::Capability(Read)),
    ("GET", D, "/snapshots/{snapshotId}", Needs::Capability(Read)),
    (
        "DELETE",
        D,
        "/snapshots/{snapshotId}",
        Needs::Capability(DataSnapshot),
    ),
    ("GET", D, "/templates", Needs::Capability(Read)),
    (
        "DELETE",
        D,
        "/templates/{templateId}",
        Needs::Capability(DataSnapshot),
    ),
    ("GET", D, "/worktrees", Needs::Capability(Read)),
    ("GET", D, "/disk", Needs::Capability(Read)),
    // Archives instances and removes archived data: an archive's capability.
    ("POST", D, "/prune", Needs::Capability(InstancesArchive)),
    // Part of an `up`: the CLI tells where the worktree it runs in lives.
    (
        "PUT",
        D,
        "/worktrees/{worktreeKey}",
        Needs::Capability(CreateGreenfield),
    ),
    // Pools and their leases: making instances ahead of time is creating them; taking,
    // resetting and releasing a lease is starting and archiving one.
    ("GET", D, "/pools", Needs::Capability(Read)),
    ("POST", D, "/pools", Needs::Capability(CreateGreenfield)),
    ("GET", D, "/pools/{name}", Needs::Capability(Read)),
    (
        "DELETE",
        D,
        "/pools/{name}",
        Needs::Capability(InstancesArchive),
    ),
    ("GET", D, "/pools/{name}/leases", Needs::Capability(Read)),
    (
        "POST",
        D,
        "/pools/{name}/leases",
        Needs::Capability(InstancesLifecycle),
    ),
    (
        "DELETE",
        D,
        "/leases/{leaseId}",
        Needs::Capability(InstancesLifecycle),
    ),
    (
        "POST",
        D,
        "/leases/{leaseId}/reset",
        Needs::Capability(InstancesLifecycle),
    ),
    (
        "POST",
        D,
        "/leases/{leaseId}/renew",
        Needs::Capability(InstancesLifecycle),
    ),
    (
        "PUT",
        D,
        "/workspace-links/{workspaceId}",
        Needs::Capability(WorkspacesLink),
    ),
    // Instances.
    ("GET", I, "", Needs::Capability(Read)),
    ("GET", I, "/endpoints", Needs::Capability(Read)),
    ("GET", I, "/image", Needs::Capability(Read)),
    ("GET", I, "/image-releases", Needs::Capability(Read)),
    // Observing never changes what runs; the daemon does it on its own every few hours.
    (
        "POST",
        I,
        "/image-releases/observe",
        Needs::Capability(Read),
    ),
    ("GET", I, "/logs", Needs::Capability(Read)),
    ("GET", I, "/releases", Needs::Capability(Read)),
    ("GET", I, "/rollouts", Needs::Capability(Read)),
    ("GET", I, "/rollouts/{rolloutId}", Needs::Capability(Read)),
    (
        "GET",
        I,
        "/rollouts/{rolloutId}/evidence",
        Needs::Capability(Read),
    ),
    (
        "GET",
        I,
        "/rollouts/{rolloutId}/reports",
        Needs::Capability(Read),
    ),
    ("GET", I, "/volumes", Needs::Capability(Read)),
    ("GET", I, "/wait", Needs::Capability(Read)),
    ("POST", I, "/up", Needs::Capability(CreateGreenfield)),
    ("POST", I, "/preflight", Needs::Capability(Preflight)),
    ("POST", I, "/start", Needs::Capability(InstancesLifecycle)),
    ("POST", I, "/stop", Needs::Capability(InstancesLifecycle)),
    ("POST", I, "/exec", Needs::Capability(InstancesExec)),
    ("POST", I, "/exec/tty", Needs::Capability(InstancesExec)),
    ("POST", I, "/snapshots", Needs::Capability(DataSnapshot)),
    ("POST", I, "/branch", Needs::Capability(DataSnapshot)),
    ("POST", I, "/restore", Needs::Capability(DataSnapshot)),
    ("POST", I, "/promote", Needs::Capability(PromoteRoute)),
    ("POST", I, "/rollback", Needs::Capability(RollbackRoute)),
    ("POST", I, "/archive", Needs::Capability(InstancesArchive)),
    // Workspaces and leases.
    ("GET", "", "/v1/workspaces", Needs::Capability(Read)),
    (
        "GET",
        "",
        "/v1/workspaces/{workspaceId}",
        Needs::Capability(Read),
    ),
    (
        "PUT",
        "",
        "/v1/workspaces/{workspaceId}",
        Needs::Capability(WorkspacesLink),
    ),
    (
        "DELETE",
        "",
        "/v1/workspaces/{workspaceId}",
        Needs::Capability(WorkspacesLink),
    ),
    (
        "POST",
        "",
        "/v1/workspaces/{workspaceId}/leases",
        Needs::Capability(WorkspacesLink),
    ),
    (
        "DELETE",
        "",
        "/v1/workspaces/{workspaceId}/leases/{leaseId}",
        Needs::Capability(WorkspacesLink),
    ),
    (
        "POST",
        "",
        "/v1/workspaces/{workspaceId}/leases/{leaseId}/renew",
        Needs::Capability(WorkspacesLink),
    ),
];

/// What the route with this method and path template needs; `None` when the table does not
/// name it.
pub fn needs(method: &str, template: &str) -> Option<Needs> {
    TABLE
        .iter()
        .find(|(m, prefix, rest, _)| {
            m.eq_ignore_ascii_case(method)
                && template.len() == prefix.len() + rest.len()
                && template.starts_with(prefix)
                && template.ends_with(rest)
        })
        .map(|(_, _, _, needs)| *needs)
}

/// The check before every `/v1` route that takes a key, in one layer: the caller's key (see
/// [`crate::auth::ServiceKeys::caller_of`]), then what its route needs. A key that lacks the
/// capability is refused with `ServiceKeyCapabilityMissingError` naming it. A per-domain grant
/// names the domain by its name or its `rdm:` id, and matches only that (an id never matches a
/// domain named like it); the path's id is looked up only for a key
/// with such grants, and a domain that is missing or not the caller's has no name, so the
/// answer is the same 403 either way. The route finds the [`Caller`] in its extensions.
pub async fn authorize(
    State(app): State<App>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let caller = app.keys.caller_of(&mut req)?;
    // Decided on borrowed parts: the common answers (allowed everywhere, or needing nothing)
    // copy nothing.
    let capability = match req.extensions().get::<MatchedPath>() {
        // No matched route: the fallback answers (404 or 405), which needs nothing.
        None => None,
        Some(template) => match needs(req.method().as_str(), template.as_str()) {
            Some(Needs::Nothing) => None,
            Some(Needs::Capability(capability)) if caller.grants.allows(capability, None) => None,
            Some(Needs::Capability(capability)) => Some(capability),
            // A route without a line in the table: only a key without grants may call it.
            None if caller.grants.is_restricted() => return Err(ApiError::CapabilityUndeclared),
            None => None,
        },
    };
    if let Some(capability) = capability {
        let (mut parts, body) = req.into_parts();
        in_domain(&app, &caller, capability, &mut parts).await?;
        req = Request::from_parts(parts, body);
    }
    req.extensions_mut().insert(caller);
    Ok(next.run(req).await)
}

/// Whether a key with per-domain grants may use `capability` in the domain its route's path
/// names; the refusal when it may not (or the path names none).
async fn in_domain(
    app: &App,
    caller: &Caller,
    capability: Capability,
    parts: &mut axum::http::request::Parts,
) -> Result<(), ApiError> {
    let domain = match parts.extract::<RawPathParams>().await {
        Ok(params) => params
            .iter()
            .find(|(name, _)| *name == "resourceDomainId")
            .map(|(_, value)| value.to_owned()),
        Err(_) => None,
    };
    // The path's id matches grants by id only; the domain's stored name, grants by name only,
    // so a domain *named* like a granted id gains nothing from that grant.
    let allowed = domain.as_deref().is_some_and(|id| {
        caller.grants.allows(capability, Some(DomainRef::Id(id)))
            || DomainId::parse(id)
                .and_then(|id| app.berth.domain(&caller.owner, &id).ok())
                .is_some_and(|d| {
                    caller
                        .grants
                        .allows(capability, Some(DomainRef::Name(&d.name)))
                })
    });
    if allowed {
        Ok(())
    } else {
        Err(ApiError::CapabilityMissing {
            capability,
            in_domain: domain.is_some(),
        })
    }
}

/// Marks every operation of `doc` with `x-berth-capability`: what the table says it needs.
/// An operation the table does not name gets no mark (the suite's test finds it).
pub fn mark(doc: &mut OpenApi) {
    for (path, item) in doc.paths.paths.iter_mut() {
        let operations = [
            ("GET", &mut item.get),
            ("PUT", &mut item.put),
            ("POST", &mut item.post),
            ("DELETE", &mut item.delete),
            ("PATCH", &mut item.patch),
        ];
        for (method, operation) in operations {
            let (Some(operation), Some(needs)) = (operation.as_mut(), needs(method, path)) else {
                continue;
            };
            let extensions = operation.extensions.get_or_insert_with(Extensions::default);
            extensions.insert(
                "x-berth-capability".to_owned(),
                serde_json::Value::from(needs.as_str()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_answers_templates() {
        assert_eq!(
            needs("POST", &format!("{I}/exec")),
            Some(Needs::Capability(InstancesExec))
        );
        assert_eq!(needs("get", D), Some(Needs::Capability(Read)));
        assert_eq!(needs("GET", "/v1/whoami"), Some(Needs::Nothing));
        assert_eq!(needs("PATCH", "/v1/whoami"), None);
        assert_eq!(needs("GET", "/v1/resource-domains/x"), None);
    }

    #[test]
    fn no_two_lines_of_the_table_name_one_route() {
        for (i, (m, p, r, _)) in TABLE.iter().enumerate() {
            let template = format!("{p}{r}");
            let first = TABLE
                .iter()
                .position(|(m2, p2, r2, _)| m2 == m && format!("{p2}{r2}") == template);
            assert_eq!(first, Some(i), "{m} {template} has two lines");
        }
    }
}
