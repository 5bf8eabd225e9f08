//! Registry credentials as the user's Docker has them: `auths` in the Docker config
//! (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), and the credential helpers it
//! names (`credHelpers`, `credsStore`), read through the `docker_credential` crate.
//!
//! A credential is only ever sent to the registry it is configured for, never logged, and
//! never kept beyond the request that needed it.

use docker_credential::{CredentialRetrievalError, DockerCredential};

/// The key Docker's config holds Docker Hub's credentials under.
const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";

/// A user name and password (or token) for one registry.
#[derive(Clone)]
pub(crate) struct Credential {
    pub(crate) username: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// What the Docker config says for `host`: `Ok(None)` when it has nothing for it (or there is
/// no config), an error sentence when it names credentials that cannot be read.
pub(crate) async fn lookup(host: &str) -> Result<Option<Credential>, String> {
    let key = config_key(host).to_owned();
    let shown = host.to_owned();
    tokio::task::spawn_blocking(move || read(&key, &shown))
        .await
        .unwrap_or(Ok(None))
}

/// The config key of a registry host: Docker Hub's is its v1 index URL.
fn config_key(host: &str) -> &str {
    match host {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB_KEY,
        _ => host,
    }
}

/// The Docker config file as Docker finds it.
fn config_file() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".docker")))?;
    Some(dir.join("config.json"))
}

fn read(key: &str, host: &str) -> Result<Option<Credential>, String> {
    // No config at all is no credential, not an error.
    if !config_file().is_some_and(|f| f.exists()) {
        return Ok(None);
    }
    match docker_credential::get_credential(key) {
        Ok(DockerCredential::UsernamePassword(username, password)) => {
            Ok(Some(Credential { username, password }))
        }
        Ok(DockerCredential::IdentityToken(_)) => Err(format!(
            "your Docker config holds an identity token for {host}, which berth cannot use: \
             log in with a user name and password or an access token (`docker login {host}`)"
        )),
        Err(
            CredentialRetrievalError::NoCredentialConfigured
            | CredentialRetrievalError::ConfigNotFound,
        ) => Ok(None),
        // The helper's own output may hold secrets: name the helper, not what it printed.
        Err(CredentialRetrievalError::HelperFailure { helper, .. }) => Err(format!(
            "the Docker credential helper docker-credential-{helper} failed for {host}: \
             check it with `docker-credential-{helper} list`"
        )),
        Err(e) => Err(format!(
            "the credentials for {host} in your Docker config could not be read: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_is_looked_up_under_its_index_url() {
        assert_eq!(config_key("docker.io"), DOCKER_HUB_KEY);
        assert_eq!(config_key("127.0.0.1:5000"), "127.0.0.1:5000");
    }

    #[test]
    fn a_credential_never_prints_its_password() {
        let c = Credential {
            username: "u".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
