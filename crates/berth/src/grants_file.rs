//! The daemon's grants file: what each service key may do.
//!
//! ```toml
//! # An IDE plugin's key works on the developer's domains and may read and link, nothing more.
//! [keys.3f2a9c01b7de]
//! actsFor = "a81c0d2e4f56"
//! capabilities = ["read", "workspaces:link"]
//!
//! # A teammate's tool may read everywhere and promote in one project.
//! [keys.77e0c1d2b3a4]
//! capabilities = ["read"]
//! serviceDeploymentGrants = [{ serviceId = "shop", capabilities = ["deployment:promote-route"] }]
//! ```
//!
//! Keys are named by their public id (`GET /v1/whoami`, `berth whoami`), never by the key: the
//! file holds no secret. A key it does not name may do everything. The file is the daemon's
//! authority, so one that the group or others may write is refused, as is any unknown field or
//! capability.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use berth_api::capabilities::{Capability, ServiceDeploymentGrant};
use berth_api::ids::DomainId;
use berth_http::{KeyConfig, KeyGrants};
use serde::Deserialize;

/// The file's name in the data directory, read when `--grants` is not given.
pub const GRANTS_FILE: &str = "grants.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    keys: BTreeMap<String, Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    acts_for: Option<String>,
    capabilities: Vec<String>,
    #[serde(default)]
    service_deployment_grants: Vec<Grant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Grant {
    service_id: String,
    capabilities: Vec<String>,
}

/// The entries of the grants file at `path` (given) or in `data_dir` (when there is one there);
/// none when neither is.
pub fn load(
    path: Option<&Path>,
    data_dir: &Path,
) -> anyhow::Result<(Vec<KeyConfig>, Option<PathBuf>)> {
    let (path, required) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => (data_dir.join(GRANTS_FILE), false),
    };
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok((Vec::new(), None));
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("could not read the grants file {}", path.display()));
        }
    };
    let mode = fs::metadata(&path)?.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        bail!(
            "the grants file {} can be changed by others (mode {mode:o}), and it says what every \
             key may do: run `chmod go-w {}`",
            path.display(),
            path.display()
        );
    }
    let entries = parse(&text).with_context(|| format!("in the grants file {}", path.display()))?;
    Ok((entries, Some(path)))
}

/// The entries `text` holds; the error names the field and what it expected.
pub fn parse(text: &str) -> anyhow::Result<Vec<KeyConfig>> {
    let file: File = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let mut out = Vec::new();
    for (id, entry) in file.keys {
        if id.len() != 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            // Not quoted: it may be a key pasted where its id belongs.
            bail!(
                "keys: an entry is named by something that is not a key id; name a key by its \
                 id, 12 hex digits (`berth whoami` shows it), never by the key itself"
            );
        }
        let everywhere = capabilities(&format!("keys.{id}.capabilities"), &entry.capabilities)?;
        let mut grants = Vec::new();
        for (i, grant) in entry.service_deployment_grants.iter().enumerate() {
            let field = format!("keys.{id}.serviceDeploymentGrants[{i}]");
            if grant.service_id.is_empty() {
                bail!("{field}.serviceId: must name a resource domain");
            }
            // A grant by id matches only that id and a grant by name only that name, so an
            // id mistyped would silently become a name: refuse what looks like an id and is not.
            if grant.service_id.starts_with(DomainId::PREFIX)
                && DomainId::parse(&grant.service_id).is_none()
            {
                bail!(
                    "{field}.serviceId: starts with `{}` but is not a resource domain id; \
                     expected an id ({}<uuid>, lower case, as `berth domains` shows it) or a \
                     domain's name",
                    DomainId::PREFIX,
                    DomainId::PREFIX
                );
            }
            grants.push(ServiceDeploymentGrant {
                service_id: grant.service_id.clone(),
                capabilities: capabilities(&format!("{field}.capabilities"), &grant.capabilities)?,
            });
        }
        out.push(KeyConfig {
            key_id: id.to_ascii_lowercase(),
            acts_for: entry.acts_for.map(|a| a.to_ascii_lowercase()),
            grants: KeyGrants::restricted(everywhere, grants),
        });
    }
    Ok(out)
}

fn capabilities(field: &str, names: &[String]) -> anyhow::Result<Vec<Capability>> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            Capability::parse(name).with_context(|| {
                let known: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "{field}[{i}]: not a capability; expected one of {}",
                    known.join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_http::DomainRef;

    #[test]
    fn the_documented_example_parses_into_the_grants_it_says() {
        let text = "[keys.3f2a9c01b7de]\nactsFor = \"a81c0d2e4f56\"\ncapabilities = [\"read\", \"workspaces:link\"]\n\n\
                    [keys.77e0c1d2b3a4]\ncapabilities = [\"read\"]\n\
                    serviceDeploymentGrants = [{ serviceId = \"shop\", capabilities = [\"deployment:promote-route\"] }]\n";
        let entries = parse(text).unwrap();
        assert_eq!(entries.len(), 2);
        let ide = &entries[0];
        assert_eq!(ide.key_id, "3f2a9c01b7de");
        assert_eq!(ide.acts_for.as_deref(), Some("a81c0d2e4f56"));
        assert!(ide.grants.allows(Capability::WorkspacesLink, None));
        assert!(
            !ide.grants
                .allows(Capability::InstancesExec, Some(DomainRef::Name("shop")))
        );
        let tool = &entries[1];
        assert!(
            tool.grants
                .allows(Capability::PromoteRoute, Some(DomainRef::Name("shop")))
        );
        assert!(
            !tool
                .grants
                .allows(Capability::PromoteRoute, Some(DomainRef::Name("blog")))
        );
    }

    #[test]
    fn a_wrong_field_or_capability_is_named() {
        let err = |t: &str| format!("{:#}", parse(t).unwrap_err());
        assert!(
            err("[keys.3f2a9c01b7de]\ncapabilities = [\"everything\"]\n").contains(
                "keys.3f2a9c01b7de.capabilities[0]: not a capability; expected one of read"
            )
        );
        assert!(err("[keys.3f2a9c01b7de]\ncapabilites = []\n").contains("capabilites"));
        let pasted = err("[keys.bsk_secret]\ncapabilities = []\n");
        assert!(pasted.contains("12 hex digits") && !pasted.contains("bsk_secret"));
        assert!(err(
            "[keys.3f2a9c01b7de]\ncapabilities = []\nserviceDeploymentGrants = [{ serviceId = \"\", capabilities = [] }]\n"
        )
        .contains("serviceDeploymentGrants[0].serviceId"));
        let mistyped = err(
            "[keys.3f2a9c01b7de]\ncapabilities = []\nserviceDeploymentGrants = [{ serviceId = \"rdm:0A1B2C3D-0000-4000-8000-000000000001\", capabilities = [] }]\n",
        );
        assert!(
            mistyped.contains("keys.3f2a9c01b7de.serviceDeploymentGrants[0].serviceId")
                && mistyped.contains("expected an id (rdm:<uuid>, lower case")
                && !mistyped.contains("0A1B2C3D"),
            "{mistyped}"
        );
    }

    #[test]
    fn a_grant_by_id_is_a_grant_for_that_id_only() {
        let id = "rdm:0a1b2c3d-0000-4000-8000-000000000001";
        let entries = parse(&format!(
            "[keys.3f2a9c01b7de]\ncapabilities = [\"domains:create\"]\n\
             serviceDeploymentGrants = [{{ serviceId = \"{id}\", capabilities = [\"instances:exec\"] }}]\n"
        ))
        .unwrap();
        let grants = &entries[0].grants;
        assert!(grants.allows(Capability::InstancesExec, Some(DomainRef::Id(id))));
        assert!(!grants.allows(Capability::InstancesExec, Some(DomainRef::Name(id))));
    }
}
