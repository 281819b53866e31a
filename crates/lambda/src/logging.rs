//! JSON logs for Lambda: one JSON object per line on stdout, which CloudWatch Logs (with the
//! function's log format set to JSON) indexes field by field.
//!
//! Each line carries the fields of the spans it was logged in: the runtime's invocation span
//! (`requestId`), the request or record span the function opens (`thread_id`, `event_id`, ...),
//! and the use-case and provider spans below it (`thread_id`, `sandbox_id`, `generation`). So a
//! query for one thread or one sandbox finds every line about it.

use tracing_subscriber::EnvFilter;

/// The level when neither `RUST_LOG` nor Lambda's `AWS_LAMBDA_LOG_LEVEL` says.
const DEFAULT_LEVEL: &str = "info";

/// Install the JSON subscriber. Call once, first thing in `main`.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter())
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(true)
        .with_ansi(false)
        .init();
}

/// `RUST_LOG` when set (a full filter, for debugging one module); otherwise the application log
/// level configured on the function (`LoggingConfig.ApplicationLogLevel`, which Lambda passes as
/// `AWS_LAMBDA_LOG_LEVEL`: TRACE, DEBUG, INFO, WARN, ERROR or FATAL); otherwise `info`.
fn filter() -> EnvFilter {
    if let Ok(filter) = EnvFilter::try_from_default_env() {
        return filter;
    }
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .map(|level| lambda_level(&level))
        .unwrap_or(DEFAULT_LEVEL);
    EnvFilter::new(level)
}

/// Lambda's level names as tracing's (tracing has no FATAL; ERROR is the nearest).
fn lambda_level(level: &str) -> &'static str {
    match level.trim().to_ascii_uppercase().as_str() {
        "TRACE" => "trace",
        "DEBUG" => "debug",
        "WARN" => "warn",
        "ERROR" | "FATAL" => "error",
        _ => DEFAULT_LEVEL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_levels_map_to_tracing_levels() {
        assert_eq!(lambda_level("DEBUG"), "debug");
        assert_eq!(lambda_level("fatal"), "error");
        assert_eq!(lambda_level("INFO"), "info");
        assert_eq!(lambda_level("nonsense"), "info");
    }
}
