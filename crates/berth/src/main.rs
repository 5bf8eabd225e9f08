//! `berth`: the daemon (`berth serve`) and, over its HTTP API, the commands people run.

mod autostart;
mod cli;
mod client;
mod grants_file;
mod mcp;
mod project;
mod relay;
mod repo;
mod serve;
mod ui;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "berth",
    version,
    about = "A local runner for developers' resource instances"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: the HTTP API and the reconciler.
    Serve(serve::ServeArgs),
    #[command(flatten)]
    Client(cli::Command),
    /// Serve this worktree's instances to a coding agent over the Model Context Protocol
    /// (stdio), with the tools the service key's capabilities allow (see docs/mcp.md).
    Mcp(mcp::McpArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match cli.command {
        Command::Serve(args) => args,
        // The commands people run: one small runtime under the client's calls.
        Command::Client(command) => {
            return match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(cli::run(command)),
                Err(e) => {
                    eprintln!("berth: could not start the async runtime: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Mcp(args) => {
            return match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => match rt.block_on(mcp::run(args)) {
                    Ok(code) => code,
                    Err(e) => {
                        cli::report(&e);
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("berth: could not start the async runtime: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "berth", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berth: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(serve::run(command));
    // Tasks still running (reconciles in flight, endpoint proxies) are abandoned, not awaited.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berth: {e:#}");
            ExitCode::FAILURE
        }
    }
}
