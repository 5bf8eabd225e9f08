//! `berth mcp`: the Model Context Protocol server over stdio. It finds the repository and the
//! worktree it was started in and the daemon and service key the CLI would use, asks the daemon
//! what the key may do (`GET /v1/whoami`), and then answers the agent's host: the tools the key
//! may call (a call to another is refused naming the capability it lacks) and the resources.
//! Nothing is written to stdout but the protocol, and the key is never in an answer.

use std::process::ExitCode;

use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

use super::access::{self, Refusal};
use super::context::Server;
use crate::cli::Conn;
use crate::repo::Repo;

#[derive(Args, Debug)]
pub struct McpArgs {
    #[command(flatten)]
    conn: Conn,
    /// The worktree to speak for [default: the one around the current directory].
    #[arg(long, short = 'C', value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
}

/// What the server tells the agent's host about itself.
const INSTRUCTIONS: &str = "berth runs this repository's resource instances (databases, caches) \
    for this git worktree, as berth.toml says. `list_instances` shows them; `up` starts them; \
    `environment` gives the variables to connect; `exec` runs a command inside one; `snapshot` \
    before a risky change and `restore` after a bad one. Names are the instance names in \
    berth.toml. Only the tools this server's key may call are listed.";

impl Server {
    /// The tools the key may call.
    fn offered(&self) -> Vec<rmcp::model::Tool> {
        self.tools
            .list_all()
            .into_iter()
            .filter(|t| access::check(&t.name, &self.held).is_ok())
            .collect()
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("berth", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.offered()))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        match access::check(name, &self.held) {
            Ok(()) => self.tools.get(name).cloned(),
            Err(_) => None,
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match access::check(&request.name, &self.held) {
            Ok(()) => {}
            Err(Refusal::Unknown) => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "no tool {:?}: tools/list names this server's tools",
                        request.name
                    ),
                    None,
                ));
            }
            Err(Refusal::Lacks(capability)) => {
                let message = format!(
                    "refused: the tool {} needs the capability `{}`, which this server's key \
                     lacks in this repository (the daemon's grants file gives capabilities; \
                     `berth whoami` shows this key's)",
                    request.name,
                    capability.as_str()
                );
                let mut result = CallToolResult::structured_error(json!({
                    "error": message,
                    "tool": request.name,
                    "capability": capability.as_str(),
                }));
                result.content = vec![rmcp::model::ContentBlock::text(message)];
                return Ok(result.into());
            }
        }
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tools.call(call).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(self.resources()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match self.read(&request.uri).await {
            Ok(contents) => Ok(ReadResourceResult::new(vec![contents]).into()),
            Err(e) => Err(ErrorData::resource_not_found(format!("{e:#}"), None)),
        }
    }
}

/// Runs the server until the host closes its stdin.
pub async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let repo = match &args.dir {
        Some(dir) => Repo::discover_in(dir)?,
        None => Repo::discover()?,
    };
    let client = args.conn.endpoint().connect().await?;
    let me = client.api.whoami().await.map_err(|e| client.explain(e))?;
    // A grant may name the domain by its id: known once the domain exists (and the key reads).
    let domain_id = match crate::cli::find_domain(&client, &repo).await {
        Ok(found) => found.map(|d| d.resource_domain_id.as_str().to_owned()),
        Err(_) => None,
    };
    let held = access::held(&me, &repo.domain_name, domain_id.as_deref());
    let tools = Server::instance_tools() + Server::output_tools() + Server::data_tools();
    let server = Server::new(client, repo, held, tools);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session did not start: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session ended with an error: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
