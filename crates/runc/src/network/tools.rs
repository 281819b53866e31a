//! The host's network tools (`ip`, `nft`, `nsenter`), run with a time limit and their
//! complaint on stderr turned into the error.

use std::path::PathBuf;
use std::time::Duration;

use threadbox_core::ports::ProviderError;

pub(super) use crate::programs::find_program;

/// How long an `ip`, `nft` or `nsenter` call may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// What one of the host's network tools prints.
pub(super) async fn tool_output(tool: &str, args: &[&str]) -> Result<String, ProviderError> {
    let stdout = call(tool, args, None, true).await?;
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// Run one of the host's network tools, with input.
pub(super) async fn run_tool(
    tool: &str,
    args: &[&str],
    input: Option<Vec<u8>>,
) -> Result<(), ProviderError> {
    call(tool, args, input, false).await.map(drop)
}

/// Run `tool` within [`TOOL_TIMEOUT`], `input` on its stdin; its stdout if `keep_stdout`.
async fn call(
    tool: &str,
    args: &[&str],
    input: Option<Vec<u8>>,
    keep_stdout: bool,
) -> Result<Vec<u8>, ProviderError> {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;
    let program: PathBuf = find_program(tool).unwrap_or_else(|| PathBuf::from(tool));
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(if keep_stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let what = format!("{tool} {}", args.join(" "));
    let run = async {
        let mut child = command.spawn()?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(&bytes).await?;
        }
        child.wait_with_output().await
    };
    let output = tokio::time::timeout(TOOL_TIMEOUT, run)
        .await
        .map_err(|_| ProviderError::Unavailable(format!("{what}: timed out")))?
        .map_err(|e| ProviderError::Internal(format!("{what}: {e}")))?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(ProviderError::Internal(format!(
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}
