//! `berth lease NAME`: a lease on the pool of an instance berth.toml declares with `pool = N`
//! (made on first use, from its template), printed as `berth env` prints the instance, with
//! `BERTH_LEASE` naming the lease; `--reset LEASE` and `--release LEASE`.

use std::process::ExitCode;

use anyhow::bail;
use berth_api::pools::is_pool_name;
use berth_client::{PoolLeaseId, PoolLeaseRequest, PoolLeaseView, PoolRequest, PoolSource};
use clap::Args;
use serde_json::Value;

use super::instances::{endpoint_tuples, shell_quote};
use super::{Conn, ensure_domain, find_domain, load_project, print_json};
use crate::client::OrSay;
use crate::repo::Repo;

#[derive(Args, Debug)]
pub struct LeaseArgs {
    #[command(flatten)]
    conn: Conn,
    /// The instance of berth.toml whose pool to lease from (it has `pool = N`).
    #[arg(value_name = "NAME")]
    name: String,
    /// Give this lease a fresh instance behind the same endpoints, instead of taking a new one.
    #[arg(long, value_name = "LEASE", conflicts_with = "release")]
    reset: Option<String>,
    /// Release this lease: its instance and its data go.
    #[arg(long, value_name = "LEASE")]
    release: Option<String>,
    /// With no ready instance in the pool, fail at once instead of waiting for the next.
    #[arg(long)]
    no_wait: bool,
    /// The lease's time to live in seconds, renewed by each reset [default: 600].
    #[arg(long, value_name = "SECONDS")]
    ttl: Option<i64>,
    /// Print the variables and the lease as one JSON object.
    #[arg(long)]
    json: bool,
}

fn lease_id(text: &str) -> anyhow::Result<PoolLeaseId> {
    PoolLeaseId::parse(text).ok_or_else(|| {
        anyhow::anyhow!(
            "--reset and --release take a lease id: {}",
            PoolLeaseId::EXPECTED
        )
    })
}

pub async fn lease(args: LeaseArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let project = load_project(&repo)?;
    let def = project
        .select(std::slice::from_ref(&args.name))?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("berth.toml has no instance {}", args.name))?;
    let Some(size) = def.pool else {
        bail!(
            "berth.toml does not give {} a pool: add pool = N (how many instances berth keeps ready) to [instances.{}]",
            def.name,
            def.name
        );
    };
    let pool = def.name.replace('_', "-");
    if !is_pool_name(&pool) {
        bail!(
            "{} cannot name a pool: a pool's name is 1 to 31 lower-case letters, digits or '-', starting with a letter",
            def.name
        );
    }
    let client = args.conn.endpoint().connect().await?;
    if let Some(id) = &args.release {
        let id = lease_id(id)?;
        let Some(domain) = find_domain(&client, &repo).await? else {
            bail!("this repository has no resource domain yet, so no lease");
        };
        client
            .api
            .release_pool_lease(&domain.resource_domain_id, &id)
            .await
            .or_say(&client)?;
        eprintln!("berth: released {id}; its instance and its data are gone");
        return Ok(ExitCode::SUCCESS);
    }
    let domain = ensure_domain(&client, &repo).await?.resource_domain_id;
    let request = PoolLeaseRequest {
        wait: Some(!args.no_wait),
        wait_seconds: None,
        ttl_seconds: args.ttl,
    };
    let lease: PoolLeaseView = match &args.reset {
        Some(id) => client
            .api
            .reset_pool_lease(&domain, &lease_id(id)?, &request)
            .await
            .or_say(&client)?,
        None => {
            let made = client
                .api
                .create_pool(
                    &domain,
                    &PoolRequest {
                        name: pool.clone(),
                        spec: def.spec_json(None),
                        from: PoolSource {
                            template: Some(true),
                            snapshot_id: None,
                        },
                        size,
                    },
                )
                .await;
            match made {
                Ok(_) => eprintln!("berth: made the pool {pool} of {size}"),
                Err(e) if e.is("ResourcePoolExistsError") => {}
                Err(e) => return Err(client.explain(e)),
            }
            client
                .api
                .take_pool_lease(&domain, &pool, &request)
                .await
                .or_say(&client)?
        }
    };
    let endpoints = endpoint_tuples(lease.endpoints.clone());
    let mut vars = def.connect_values(&endpoints).map_err(anyhow::Error::msg)?;
    vars.push(("BERTH_LEASE".to_owned(), lease.lease_id.to_string()));
    if args.json {
        let mut map: serde_json::Map<String, Value> =
            vars.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        map.insert("lease".to_owned(), serde_json::to_value(&lease)?);
        print_json(&Value::Object(map));
        return Ok(ExitCode::SUCCESS);
    }
    for (name, value) in vars {
        println!("export {name}={}", shell_quote(&value));
    }
    Ok(ExitCode::SUCCESS)
}
