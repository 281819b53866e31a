//! What the benchmarks share: the rounds asked for, the machine's load, and quantiles. A
//! benchmark prints figures and asserts nothing about time (see BENCHMARKS.md).

use std::time::Duration;

/// `THREADBOX_BENCH_RUNS` when it is a positive number, else `default`.
pub fn runs(default: usize) -> usize {
    std::env::var("THREADBOX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(default)
}

/// The host's load average (1, 5 and 15 minutes), as `uptime` shows it: on a shared machine how
/// busy it was matters more to the figures than anything threadbox does.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// The `p` quantile of `samples` (nearest rank), in milliseconds; NaN for no samples.
pub fn percentile(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank_in_milliseconds() {
        let samples: Vec<Duration> = [30, 10, 20, 40].map(Duration::from_millis).to_vec();
        assert_eq!(percentile(&samples, 0.5), 20.0);
        assert_eq!(percentile(&samples, 0.9), 40.0);
        assert_eq!(percentile(&samples, 0.0), 10.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
