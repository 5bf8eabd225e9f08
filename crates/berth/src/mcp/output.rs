//! The tools for what runs inside an instance: its logs (a bounded tail, capped in bytes) and
//! a command (an argv array run in the container by the daemon's exec route, never a shell on
//! the host; a timeout, no stdin, its output capped).

use std::time::Duration;

use berth_client::ExecFrame;
use futures_util::StreamExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{ErrorData, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::context::{Server, answer, failure};

/// The most bytes of logs, and of each of a command's stdout and stderr, a tool answers with:
/// the last ones.
pub const OUTPUT_CAP: usize = 64 * 1024;
const TAIL_MAX: u64 = 2000;
const TAIL_DEFAULT: u64 = 100;
/// How long reading a tail may take.
const LOGS_TIMEOUT: Duration = Duration::from_secs(30);
const EXEC_TIMEOUT_MAX: u64 = 600;
const EXEC_TIMEOUT_DEFAULT: u64 = 60;
const ARGV_MAX: usize = 256;
const ARG_MAX_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogsInput {
    /// The instance's name in berth.toml.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// How many of its last lines (1 to 2000; default 100). At most 64 KiB come back: the last.
    #[schemars(range(min = 1, max = 2000))]
    pub tail: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecInput {
    /// The instance's name in berth.toml.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// The program and its arguments, run in the instance's container as given: no host shell.
    #[schemars(length(min = 1, max = 256))]
    pub argv: Vec<String>,
    /// The user to run as inside the container: a name, uid or uid:gid (default: the image's).
    #[schemars(length(min = 1, max = 64))]
    pub user: Option<String>,
    /// Kill the command after this many seconds (1 to 600; default 60).
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: Option<u64>,
}

/// The last `cap` bytes of `text` (cut at a character boundary), and whether any were cut.
pub fn last_bytes(text: &str, cap: usize) -> (String, bool) {
    if text.len() <= cap {
        return (text.to_owned(), false);
    }
    let mut start = text.len() - cap;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    (text[start..].to_owned(), true)
}

fn check_exec(input: &ExecInput) -> anyhow::Result<u64> {
    if input.argv.is_empty() || input.argv.len() > ARGV_MAX {
        anyhow::bail!(
            "argv: expected 1 to {ARGV_MAX} strings (the program and its arguments), not {}",
            input.argv.len()
        );
    }
    if input.argv[0].is_empty() {
        anyhow::bail!("argv[0]: expected the program to run, not an empty string");
    }
    if let Some(i) = input
        .argv
        .iter()
        .position(|a| a.len() > ARG_MAX_BYTES || a.contains('\0'))
    {
        anyhow::bail!("argv[{i}]: expected at most {ARG_MAX_BYTES} bytes with no NUL");
    }
    if let Some(user) = &input.user
        && (user.is_empty() || user.len() > 64 || user.chars().any(char::is_control))
    {
        anyhow::bail!("user: expected a user name, uid or uid:gid of 1 to 64 characters");
    }
    let timeout = input.timeout_seconds.unwrap_or(EXEC_TIMEOUT_DEFAULT);
    if !(1..=EXEC_TIMEOUT_MAX).contains(&timeout) {
        anyhow::bail!(
            "timeoutSeconds: expected a number of seconds from 1 to {EXEC_TIMEOUT_MAX}, not {timeout}"
        );
    }
    Ok(timeout)
}

#[tool_router(router = output_tools, vis = "pub(super)")]
impl Server {
    #[tool(
        description = "The last lines an instance of this worktree wrote (a bounded tail: at most 2000 lines, the last 64 KiB of them). Changes nothing.",
        annotations(read_only_hint = true)
    )]
    pub async fn logs(
        &self,
        Parameters(input): Parameters<LogsInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.tail(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }

    #[tool(
        description = "Run a command inside one of this worktree's instances (an argv array, run in its container as it is; nothing reaches a shell on the host), with no stdin, and answer its exit code, stdout and stderr (the last 64 KiB of each). Changes whatever the command changes inside the instance; it is killed at its timeout.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn exec(
        &self,
        Parameters(input): Parameters<ExecInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.run(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }
}

impl Server {
    async fn tail(&self, input: LogsInput) -> anyhow::Result<(String, Value)> {
        let tail = input.tail.unwrap_or(TAIL_DEFAULT);
        if !(1..=TAIL_MAX).contains(&tail) {
            anyhow::bail!("tail: expected a number of lines from 1 to {TAIL_MAX}, not {tail}");
        }
        let (domain, instance) = self.own(&input.name).await?;
        let stream = self
            .client
            .api
            .logs(&domain, &instance.key, Some(tail), false)
            .await
            .map_err(|e| self.client.explain(e))?;
        let mut stream = std::pin::pin!(stream);
        // Only the last bytes are kept while reading: the stream's end is what counts.
        let mut kept: Vec<u8> = Vec::new();
        let mut cut = false;
        let read = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.client.explain(e))?;
                kept.extend_from_slice(&chunk);
                if kept.len() > 2 * OUTPUT_CAP {
                    kept.drain(..kept.len() - OUTPUT_CAP);
                    cut = true;
                }
            }
            anyhow::Ok(())
        };
        let complete = tokio::time::timeout(LOGS_TIMEOUT, read)
            .await
            .is_ok_and(|r| r.is_ok());
        let text = String::from_utf8_lossy(&kept);
        let (text, more) = last_bytes(&text, OUTPUT_CAP);
        let truncated = cut || more;
        let lines = text.lines().count();
        let summary = format!(
            "{lines} line(s) of {} ({}){}",
            input.name,
            instance.key,
            if truncated {
                ": only the last 64 KiB"
            } else {
                ""
            }
        );
        Ok((
            summary,
            json!({
                "name": input.name,
                "key": instance.key,
                "text": text,
                "truncated": truncated,
                "complete": complete,
            }),
        ))
    }

    async fn run(&self, input: ExecInput) -> anyhow::Result<(String, Value)> {
        let timeout = check_exec(&input)?;
        let (domain, instance) = self.own(&input.name).await?;
        let frame = ExecFrame {
            argv: input.argv,
            user: input.user,
            timeout_ms: i64::try_from(timeout * 1000).unwrap_or(i64::MAX),
        };
        let result = self
            .client
            .api
            .exec_bytes(&domain, &instance.key, &frame, bytes::Bytes::new())
            .await
            .map_err(|e| self.client.explain(e))?;
        let (stdout, out_cut) = last_bytes(&result.stdout, OUTPUT_CAP);
        let (stderr, err_cut) = last_bytes(&result.stderr, OUTPUT_CAP);
        let truncated = result.truncated || out_cut || err_cut;
        // The command is the agent's own: it is not said back (argv may carry secrets).
        let summary = if result.timed_out {
            format!(
                "the command in {} was killed after {timeout}s",
                instance.key
            )
        } else {
            match result.exit_code {
                Some(code) => format!("the command in {} exited {code}", instance.key),
                None => format!("the command in {} ended with no exit code", instance.key),
            }
        };
        Ok((
            summary,
            json!({
                "name": input.name,
                "key": instance.key,
                "exitCode": result.exit_code,
                "timedOut": result.timed_out,
                "stdout": stdout,
                "stderr": stderr,
                "truncated": truncated,
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::last_bytes;

    #[test]
    fn output_is_cut_to_its_last_bytes_on_a_character_boundary() {
        assert_eq!(last_bytes("abc", 5), ("abc".to_owned(), false));
        assert_eq!(last_bytes("abcdef", 3), ("def".to_owned(), true));
        // "é" is two bytes: a cut inside it moves past it.
        assert_eq!(last_bytes("aéz", 2), ("z".to_owned(), true));
    }
}
