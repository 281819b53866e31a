//! Replies as Slack text: a command's result with its output trimmed to fit, and the escaping
//! Slack's mrkdwn needs.
//!
//! Slack truncates very long messages and clients fold long ones, so a reply stays within
//! [`REPLY_BUDGET`] characters. When output does not fit, the start and the end are kept (the
//! start says what ran, the end holds the error or the result) and the reply says how much was
//! cut.

use std::time::Duration;

use threadbox_core::ports::ExecResult;

/// Characters one reply may use, everything included. Well under Slack's 4,000-character advice
/// for `text`, so a reply is never cut by Slack itself.
pub const REPLY_BUDGET: usize = 3_000;

/// Room kept for the header line, the stream labels, fences and the notes.
const OVERHEAD: usize = 400;

/// Escape the three characters Slack's mrkdwn gives meaning to.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Text inside a ``` block: escaped, and with any ``` in it broken up so it cannot close the
/// block early (a zero-width space between the backticks).
fn fenced(text: &str) -> String {
    let body = escape(text).replace("```", "``\u{200b}`");
    format!("```\n{}\n```", body.trim_end_matches('\n'))
}

/// The result of fitting text into a number of characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trimmed {
    pub text: String,
    /// Characters of the original kept.
    pub kept: usize,
    /// Characters in the original.
    pub total: usize,
}

impl Trimmed {
    pub fn was_cut(&self) -> bool {
        self.kept < self.total
    }
}

/// Keep at most `max` characters of `text`: all of it, or its start and end around a marker
/// line. Cuts fall on line breaks when one is near, so lines are not split needlessly.
pub fn trim_middle(text: &str, max: usize) -> Trimmed {
    let total = text.chars().count();
    if total <= max {
        return Trimmed {
            text: text.to_owned(),
            kept: total,
            total,
        };
    }
    const MARKER_ROOM: usize = 40;
    let room = max.saturating_sub(MARKER_ROOM);
    let head_chars = room * 2 / 5;
    let tail_chars = room - head_chars;
    let head = snap_head(take_chars(text, head_chars));
    let tail = snap_tail(last_chars(text, tail_chars));
    let kept = head.chars().count() + tail.chars().count();
    let marker = format!("… [{} characters cut] …", total - kept);
    Trimmed {
        text: format!("{}\n{marker}\n{}", head.trim_end_matches('\n'), tail),
        kept,
        total,
    }
}

fn take_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

fn last_chars(text: &str, n: usize) -> &str {
    let total = text.chars().count();
    if n >= total {
        return text;
    }
    if n == 0 {
        return "";
    }
    let (at, _) = text
        .char_indices()
        .nth(total - n)
        .expect("n < total, so the index exists");
    &text[at..]
}

/// End the head at its last line break when that keeps most of it.
fn snap_head(head: &str) -> &str {
    match head.rfind('\n') {
        Some(at) if at >= head.len() * 3 / 4 => &head[..=at],
        _ => head,
    }
}

/// Start the tail after its first line break when that keeps most of it.
fn snap_tail(tail: &str) -> &str {
    match tail.find('\n') {
        Some(at) if at <= tail.len() / 4 => &tail[at + 1..],
        _ => tail,
    }
}

/// "340 ms", "1.25 s", "2 min 5 s".
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1_000)
    }
}

/// The reply to a code block that ran: outcome, duration, then stdout and stderr, within
/// `budget` characters.
pub fn exec_reply(language: &str, result: &ExecResult, budget: usize) -> String {
    let header = exec_header(language, result);
    let available = budget.saturating_sub(OVERHEAD + header.chars().count());
    let (out_room, err_room) = split_room(
        block_len(&result.stdout),
        block_len(&result.stderr),
        available,
    );
    let stdout = fit_fenced(&result.stdout, out_room);
    let stderr = fit_fenced(&result.stderr, err_room);

    let mut reply = header;
    let mut cut = Vec::new();
    for (label, stream) in [("stdout", &stdout), ("stderr", &stderr)] {
        if let Some((block, trimmed)) = stream {
            reply.push_str(&format!("\n*{label}*\n{block}"));
            if trimmed.was_cut() {
                cut.push(format!(
                    "{label} shows {} of {} characters",
                    group_thousands(trimmed.kept),
                    group_thousands(trimmed.total)
                ));
            }
        }
    }
    if stdout.is_none() && stderr.is_none() {
        reply.push_str("\n_(no output)_");
    }
    if !cut.is_empty() {
        reply.push_str(&format!(
            "\n_Output cut to fit in Slack: {} (the start and the end)._",
            cut.join(", ")
        ));
    }
    if result.truncated {
        reply.push_str(
            "\n_The sandbox kept only the start of the output; write large output to a file and \
             use `files` to find it._",
        );
    }
    reply
}

/// The first line of a code block's reply: how it ended and how long it took.
fn exec_header(language: &str, result: &ExecResult) -> String {
    let took = duration(Duration::from_millis(result.duration_ms));
    if result.timed_out {
        format!(":hourglass: `{language}` timed out after {took} and was stopped")
    } else if result.out_of_memory {
        format!(":boom: `{language}` ran out of memory after {took} and was killed")
    } else {
        match result.exit_code {
            Some(0) => format!(":white_check_mark: `{language}` exited 0 in {took}"),
            Some(code) => format!(":x: `{language}` exited {code} in {took}"),
            None => format!(":x: `{language}` was killed by a signal after {took}"),
        }
    }
}

/// Whether [`exec_reply`] shows all of this result's output within `budget` characters.
pub fn fits_inline(language: &str, result: &ExecResult, budget: usize) -> bool {
    let header = exec_header(language, result);
    let available = budget.saturating_sub(OVERHEAD + header.chars().count());
    block_len(&result.stdout) + block_len(&result.stderr) <= available
}

/// Lines of each stream shown above an attached output file.
pub const PREVIEW_LINES: usize = 10;
/// Characters of each stream shown above an attached output file.
const PREVIEW_CHARS: usize = 1_000;

/// The reply for output too long to show whole: the header, the first lines of each stream,
/// and where the rest is (`filename`, attached with it).
pub fn exec_reply_with_file(language: &str, result: &ExecResult, filename: &str) -> String {
    let mut reply = exec_header(language, result);
    for (label, stream) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if stream.trim().is_empty() {
            continue;
        }
        let head: String = stream
            .lines()
            .take(PREVIEW_LINES)
            .collect::<Vec<_>>()
            .join("\n");
        let head = take_chars(&head, PREVIEW_CHARS);
        reply.push_str(&format!(
            "\n*{label}* (first lines of {})\n{}",
            lines_words(stream),
            fenced(head)
        ));
    }
    reply.push_str(&format!(
        "\n:page_facing_up: The whole output is in `{}`, attached.",
        escape(filename)
    ));
    if result.truncated {
        reply.push_str(
            "\n_The sandbox kept only the start of the output; write large output to a file and \
             use `files` to find it._",
        );
    }
    reply
}

/// The attached file's text: stdout, then stderr under a marker line when there is any.
pub fn output_file(result: &ExecResult) -> String {
    match (result.stdout.is_empty(), result.stderr.is_empty()) {
        (_, true) => result.stdout.clone(),
        (true, false) => result.stderr.clone(),
        (false, false) => format!(
            "{}{}----- stderr -----\n{}",
            result.stdout,
            if result.stdout.ends_with('\n') {
                ""
            } else {
                "\n"
            },
            result.stderr
        ),
    }
}

/// "1 line", "12,345 lines".
fn lines_words(text: &str) -> String {
    match text.lines().count() {
        1 => "1 line".to_owned(),
        n => format!("{} lines", group_thousands(n)),
    }
}

/// Share `available` characters between two streams: each gets what it needs if both fit,
/// otherwise a fair half, with what one leaves unused going to the other.
fn split_room(out: usize, err: usize, available: usize) -> (usize, usize) {
    if out + err <= available {
        return (out, err);
    }
    let half = available / 2;
    if out <= half {
        (out, available - out)
    } else if err <= half {
        (available - err, err)
    } else {
        (half, available - half)
    }
}

/// Characters a stream takes as a code block, or 0 when it is empty (and not shown).
fn block_len(text: &str) -> usize {
    if text.trim().is_empty() {
        0
    } else {
        fenced(text).chars().count()
    }
}

/// A stream as a code block of at most `room` characters, fences and escaping included;
/// `None` if the stream is empty.
fn fit_fenced(text: &str, room: usize) -> Option<(String, Trimmed)> {
    if text.trim().is_empty() {
        return None;
    }
    let whole = fenced(text);
    if whole.chars().count() <= room {
        let total = text.chars().count();
        let all = Trimmed {
            text: text.to_owned(),
            kept: total,
            total,
        };
        return Some((whole, all));
    }
    // Fences and escaping lengthen the text; start from the room less the fences and shrink
    // until the block fits (text full of & < > needs a few rounds).
    let mut limit = room.saturating_sub(8);
    loop {
        let trimmed = trim_middle(text, limit);
        let block = fenced(&trimmed.text);
        let len = block.chars().count();
        if len <= room || limit == 0 {
            return Some((block, trimmed));
        }
        // Scale by how much escaping inflated this attempt, and always make progress.
        let scaled = limit * room / len;
        limit = scaled.min(limit.saturating_sub(16));
    }
}

/// 12345 -> "12,345".
pub fn group_thousands(n: usize) -> String {
    let digits: Vec<char> = n.to_string().chars().collect();
    let groups: Vec<String> = digits
        .rchunks(3)
        .rev()
        .map(|group| group.iter().collect())
        .collect();
    groups.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(stdout: &str, stderr: &str, exit_code: Option<i32>) -> ExecResult {
        ExecResult {
            exit_code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            duration_ms: 1_234,
            timed_out: false,
            truncated: false,
            out_of_memory: false,
        }
    }

    #[test]
    fn short_output_is_shown_whole_with_exit_code_and_duration() {
        let reply = exec_reply("python", &result("hello\n", "", Some(0)), REPLY_BUDGET);
        assert!(
            reply.starts_with(":white_check_mark: `python` exited 0 in 1.23 s"),
            "{reply}"
        );
        assert!(reply.contains("*stdout*\n```\nhello\n```"), "{reply}");
        assert!(!reply.contains("stderr"), "{reply}");
        assert!(!reply.contains("cut"), "{reply}");
    }

    #[test]
    fn long_output_is_trimmed_to_the_budget_with_a_note() {
        let stdout: String = (0..5_000).map(|i| format!("line {i}\n")).collect();
        let stderr = "Traceback: boom\n".repeat(400);
        let reply = exec_reply("bash", &result(&stdout, &stderr, Some(2)), REPLY_BUDGET);
        assert!(
            reply.chars().count() <= REPLY_BUDGET,
            "{}",
            reply.chars().count()
        );
        assert!(reply.starts_with(":x: `bash` exited 2"), "{reply}");
        assert!(reply.contains("line 0\n"), "the start is kept");
        assert!(reply.contains("line 4999"), "the end is kept");
        assert!(reply.contains("characters cut]"), "{reply}");
        assert!(
            reply.contains("_Output cut to fit in Slack: stdout shows"),
            "{reply}"
        );
        assert!(reply.contains("stderr shows"), "{reply}");
        assert!(reply.contains(&format!("of {} characters", group_thousands(stdout.len()))));
    }

    #[test]
    fn output_that_is_all_special_characters_still_fits() {
        let stdout = "<&>".repeat(3_000);
        let reply = exec_reply("sh", &result(&stdout, "", Some(0)), REPLY_BUDGET);
        assert!(
            reply.chars().count() <= REPLY_BUDGET,
            "{}",
            reply.chars().count()
        );
        assert!(reply.contains("&lt;&amp;&gt;"));
    }

    #[test]
    fn fences_in_output_cannot_close_the_block_and_mrkdwn_is_escaped() {
        let reply = exec_reply("bash", &result("```\n<b>&", "", Some(0)), REPLY_BUDGET);
        assert_eq!(reply.matches("```").count(), 2, "{reply}");
        assert!(reply.contains("&lt;b&gt;&amp;"), "{reply}");
    }

    #[test]
    fn timeouts_kills_and_silence_are_said_plainly() {
        let mut r = result("", "", None);
        r.timed_out = true;
        let reply = exec_reply("bash", &r, REPLY_BUDGET);
        assert!(reply.contains("timed out after 1.23 s"), "{reply}");
        assert!(reply.contains("(no output)"), "{reply}");
        let mut r = result("", "", None);
        r.out_of_memory = true;
        assert!(exec_reply("bash", &r, REPLY_BUDGET).contains("ran out of memory"));
        let mut r = result("x", "", Some(0));
        r.truncated = true;
        assert!(exec_reply("bash", &r, REPLY_BUDGET).contains("kept only the start"));
    }

    #[test]
    fn trimming_keeps_both_ends_and_counts_characters_not_bytes() {
        let text = "é".repeat(1_000);
        let t = trim_middle(&text, 100);
        assert!(t.was_cut());
        assert_eq!(t.total, 1_000);
        assert!(t.kept <= 100);
        assert!(t.text.starts_with('é') && t.text.ends_with('é'));
        let whole = trim_middle("short", 100);
        assert_eq!((whole.text.as_str(), whole.was_cut()), ("short", false));
    }

    #[test]
    fn durations_and_numbers_read_well() {
        assert_eq!(duration(Duration::from_millis(340)), "340 ms");
        assert_eq!(duration(Duration::from_millis(1_250)), "1.25 s");
        assert_eq!(duration(Duration::from_millis(125_000)), "2 min 5 s");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
        assert_eq!(group_thousands(999), "999");
    }
}
