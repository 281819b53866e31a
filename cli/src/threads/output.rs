//! Where the operator commands' results go: stdout, as text for people or JSON for scripts.
//! Diagnostics are not results and go to stderr from the callers.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use serde::Serialize;

#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// JSON instead of tables.
    pub json: bool,
    /// ANSI colours: only on a terminal, and never when `NO_COLOR` is set (no-color.org).
    pub color: bool,
}

impl Output {
    pub fn new(json: bool) -> Self {
        let color = !json
            && std::io::stdout().is_terminal()
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Self { json, color }
    }

    /// Text exactly as given (callers end their lines).
    pub fn text(&self, text: &str) -> anyhow::Result<()> {
        write_stdout(text.as_bytes())
    }

    /// One value as indented JSON, for a command that returns one document.
    pub fn document<T: Serialize>(&self, value: &T) -> anyhow::Result<()> {
        let mut text = serde_json::to_string_pretty(value)?;
        text.push('\n');
        write_stdout(text.as_bytes())
    }

    /// One value as one line of JSON, for streams (`events`): each line parses on its own.
    pub fn line<T: Serialize>(&self, value: &T) -> anyhow::Result<()> {
        let mut text = serde_json::to_string(value)?;
        text.push('\n');
        write_stdout(text.as_bytes())
    }
}

/// Write and flush, so a followed stream shows each line as it comes even through a pipe. A
/// reader that went away (`| head -1`) surfaces as a broken pipe, which `main` treats as a
/// normal end.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}
