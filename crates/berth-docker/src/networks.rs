//! Networks: one user-defined bridge per berth use, created once and never adopted when foreign.

use std::collections::HashMap;
use std::time::Duration;

use berth_core::ownership::LABEL_STORE;
use berth_core::runtime::{LABEL_MANAGED, LABEL_PREFIX, Labels, RuntimeError};
use bollard::Docker;
use bollard::models::{
    EndpointSettings, NetworkConnectRequest, NetworkCreateRequest, NetworkDisconnectRequest,
};
use bollard::query_parameters::ListNetworksOptions;
use http::{Method, StatusCode};

use crate::error;
use crate::raw::RawClient;

const RAW_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) async fn ensure_network(
    docker: &Docker,
    raw: Option<&RawClient>,
    name: &str,
    labels: &Labels,
) -> Result<(), RuntimeError> {
    let prefix = labels.get(LABEL_PREFIX).map_or("", String::as_str);
    if let Some(existing) = existing_labels(docker, name, prefix).await? {
        return check(name, labels, &existing);
    }
    tracing::debug!(network = %name, "creating network");
    match create(docker, raw, name, labels).await {
        Ok(()) => Ok(()),
        // Someone created it between the inspect and the create: judge theirs.
        Err(RuntimeError::Conflict(message)) => {
            match existing_labels(docker, name, prefix).await? {
                Some(existing) => check(name, labels, &existing),
                None => Err(RuntimeError::Conflict(message)),
            }
        }
        Err(e) => Err(e),
    }
}

/// Attaches a container with `aliases`. Already attached is Ok (the engine answers 403 for
/// that on 20.10 and 409 on later versions).
pub(crate) async fn connect(
    docker: &Docker,
    network: &str,
    container: &str,
    aliases: &[String],
) -> Result<(), RuntimeError> {
    let request = NetworkConnectRequest {
        container: container.to_owned(),
        endpoint_config: Some(EndpointSettings {
            aliases: (!aliases.is_empty()).then(|| aliases.to_vec()),
            ..Default::default()
        }),
    };
    tracing::debug!(network = %network, container = %container, "attaching a container");
    match docker.connect_network(network, request).await {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(error::status(&e), Some(403 | 409))
                && e.to_string().contains("already exists") =>
        {
            Ok(())
        }
        Err(e) => Err(error::map(
            e,
            &format!("attaching {container} to network {network}"),
        )),
    }
}

/// Detaches a container. Not attached, or either of them gone, is Ok.
pub(crate) async fn disconnect(
    docker: &Docker,
    network: &str,
    container: &str,
) -> Result<(), RuntimeError> {
    let request = NetworkDisconnectRequest {
        container: container.to_owned(),
        force: Some(true),
    };
    tracing::debug!(network = %network, container = %container, "detaching a container");
    match docker.disconnect_network(network, request).await {
        Ok(()) => Ok(()),
        Err(e) if matches!(error::status(&e), Some(403 | 404 | 409)) => Ok(()),
        Err(e) => Err(error::map(
            e,
            &format!("detaching {container} from network {network}"),
        )),
    }
}

/// Removes a network of berth's under `prefix`. Gone already is Ok; a network without berth's
/// labels is `Foreign` and is left alone.
pub(crate) async fn remove(docker: &Docker, name: &str, prefix: &str) -> Result<(), RuntimeError> {
    let Some(existing) = existing_labels(docker, name, prefix).await? else {
        return Ok(());
    };
    let ours = existing.get(LABEL_MANAGED).map(String::as_str) == Some("1")
        && existing.get(LABEL_PREFIX).map(String::as_str) == Some(prefix);
    if !ours {
        return Err(RuntimeError::Foreign(format!(
            "the network {name} is not berth's; berth leaves it"
        )));
    }
    tracing::debug!(network = %name, "removing network");
    match docker.remove_network(name).await {
        Ok(()) => Ok(()),
        Err(e) if error::status(&e) == Some(404) => Ok(()),
        Err(e) => Err(error::map(e, &format!("network {name}"))),
    }
}

/// The labels of the network named exactly `name`, if there is one. Several networks of that
/// name are made one again first (see [`deduplicate`]).
async fn existing_labels(
    docker: &Docker,
    name: &str,
    prefix: &str,
) -> Result<Option<HashMap<String, String>>, RuntimeError> {
    match docker.inspect_network(name, None).await {
        // The engine also finds a network by id prefix: only an exact name counts.
        Ok(network) if network.name.as_deref() == Some(name) => {
            Ok(Some(network.labels.unwrap_or_default()))
        }
        Ok(_) => Ok(None),
        Err(e) if error::status(&e) == Some(404) => Ok(None),
        Err(e) if error::status(&e) == Some(400) && error::message(&e).contains("ambiguous") => {
            deduplicate(docker, name, prefix).await
        }
        Err(e) => Err(error::map(e, &format!("network {name}"))),
    }
}

/// Docker 20.10 makes a second network of a name when two creates race, as the create of a
/// daemon killed in the middle of it and its restart's can; the name then answers nothing but
/// "ambiguous". When every network of the name is this berth's, the one with containers (or
/// the first by id) is kept and the others, which have none, are removed. Returns the labels of
/// the one kept.
async fn deduplicate(
    docker: &Docker,
    name: &str,
    prefix: &str,
) -> Result<Option<HashMap<String, String>>, RuntimeError> {
    let what = format!("network {name}");
    let options = ListNetworksOptions {
        filters: Some(HashMap::from([("name".to_owned(), vec![name.to_owned()])])),
    };
    let listed = docker
        .list_networks(Some(options))
        .await
        .map_err(|e| error::map(e, &what))?;
    let mut same = Vec::new();
    for id in listed
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .filter_map(|n| n.id)
    {
        match docker.inspect_network(&id, None).await {
            Ok(network) => same.push(network),
            Err(e) if error::status(&e) == Some(404) => {}
            Err(e) => return Err(error::map(e, &what)),
        }
    }
    let ours = |labels: &Option<HashMap<String, String>>| {
        labels.as_ref().is_some_and(|l| {
            l.get(LABEL_MANAGED).map(String::as_str) == Some("1")
                && l.get(LABEL_PREFIX).map(String::as_str) == Some(prefix)
        })
    };
    if !same.iter().all(|n| ours(&n.labels)) {
        return Err(RuntimeError::Foreign(format!(
            "{} networks are named {name} and not all of them are berth's; remove all but one",
            same.len()
        )));
    }
    let in_use =
        |n: &bollard::models::NetworkInspect| n.containers.as_ref().is_some_and(|c| !c.is_empty());
    same.sort_by_key(|n| (!in_use(n), n.id.clone()));
    let mut same = same.into_iter();
    let Some(kept) = same.next() else {
        return Ok(None);
    };
    for extra in same {
        let id = extra.id.clone().unwrap_or_default();
        if in_use(&extra) {
            return Err(RuntimeError::Engine(format!(
                "several networks are named {name} and more than one has containers; remove all but one"
            )));
        }
        tracing::warn!(network = %name, id = %id, "removing a second network of the same name");
        match docker.remove_network(&id).await {
            Ok(()) => {}
            Err(e) if error::status(&e) == Some(404) => {}
            Err(e) => return Err(error::map(e, &what)),
        }
    }
    Ok(Some(kept.labels.unwrap_or_default()))
}

/// berth adopts a network only when it is managed by berth under the same prefix.
fn check(
    name: &str,
    labels: &Labels,
    existing: &HashMap<String, String>,
) -> Result<(), RuntimeError> {
    let managed = existing.get(LABEL_MANAGED).map(String::as_str) == Some("1");
    let same_prefix = existing.get(LABEL_PREFIX) == labels.get(LABEL_PREFIX);
    // A network made before berth labelled its store carries none and is adopted as before;
    // one of another store is not.
    let same_store = existing
        .get(LABEL_STORE)
        .is_none_or(|store| Some(store) == labels.get(LABEL_STORE));
    if managed && same_prefix && same_store {
        Ok(())
    } else {
        Err(RuntimeError::Foreign(format!(
            "a network named {name} exists that berth did not create; remove or rename it"
        )))
    }
}

/// Creates a bridge network, refusing a duplicate name (409 → `Conflict`).
async fn create(
    docker: &Docker,
    raw: Option<&RawClient>,
    name: &str,
    labels: &Labels,
) -> Result<(), RuntimeError> {
    let what = format!("network {name}");
    let Some(raw) = raw else {
        // Without a raw client the typed request cannot ask for `CheckDuplicate`; the engine
        // still refuses a duplicate from API 1.44 on.
        let request = NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("bridge".to_owned()),
            labels: Some(labels.clone().into_iter().collect()),
            ..Default::default()
        };
        return docker
            .create_network(request)
            .await
            .map(|_| ())
            .map_err(|e| error::map(e, &what));
    };
    let body = serde_json::json!({
        "Name": name,
        "Driver": "bridge",
        "CheckDuplicate": true,
        "Labels": labels,
    });
    let response = raw
        .request(
            Method::POST,
            "/networks/create",
            Some(body.to_string().into_bytes()),
            RAW_TIMEOUT,
        )
        .await?;
    match response.status {
        s if s.is_success() => Ok(()),
        StatusCode::CONFLICT => Err(RuntimeError::Conflict(response.message())),
        StatusCode::NOT_FOUND => Err(RuntimeError::NotFound(what)),
        s => Err(RuntimeError::Engine(format!(
            "{} ({what}, HTTP {})",
            response.message(),
            s.as_u16()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopts_only_a_managed_network_of_the_same_prefix() {
        let ours: Labels = [(LABEL_MANAGED, "1"), (LABEL_PREFIX, "p1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let theirs = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(
            check(
                "n",
                &ours,
                &theirs(&[(LABEL_MANAGED, "1"), (LABEL_PREFIX, "p1")])
            )
            .is_ok()
        );
        for foreign in [
            theirs(&[]),
            theirs(&[(LABEL_PREFIX, "p1")]),
            theirs(&[(LABEL_MANAGED, "1"), (LABEL_PREFIX, "p2")]),
        ] {
            let err = check("n", &ours, &foreign).unwrap_err();
            assert_eq!(
                err.to_string(),
                "a network named n exists that berth did not create; remove or rename it"
            );
        }
    }
}
