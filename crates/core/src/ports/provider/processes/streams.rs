//! Which stream each byte of a process's output came from.
//!
//! The ring holds stdout and stderr merged, in the order they were written, so offsets mean
//! what they always have; next to each chunk `out.N`, the sandbox's writer keeps `err.N`, a
//! bitmap with bit i (least significant first) set when byte i of the chunk came from stderr.
//! A chunk without one, or bits past its end, are stdout. Chunks are a multiple of 8 bytes, so
//! the bitmaps of consecutive chunks join into one: the tags of bytes [a, b) are bitmap bytes
//! [a/8, (b+7)/8) wherever they are read.
//!
//! The tags are the sandbox's own writing, like the output they describe: a sandbox that forges
//! them only mislabels its own output, and every reader here is bounded by the bytes it tags.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{ProcessChunk, MAX_OUTPUT_OFFSET};

/// The stream a piece of output came from. A process on a terminal has one output, reported
/// as stdout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    #[default]
    Stdout,
    Stderr,
}

/// How many bitmap bytes tag `len` output bytes from `offset`.
pub fn tag_bytes(offset: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    (offset + len).div_ceil(8) - offset / 8
}

/// The pieces of `data` (output from `offset`) by stream, in order, from its tags (bitmap
/// bytes from `offset / 8`; missing ones are stdout).
pub fn tagged_pieces(offset: u64, data: &[u8], tags: &[u8]) -> Vec<ProcessChunk> {
    stderr_ranges(offset, data.len() as u64, tags)
        .into_iter()
        .map(|(range, stream)| ProcessChunk {
            offset: range.start,
            data: data[(range.start - offset) as usize..(range.end - offset) as usize].to_vec(),
            stream,
        })
        .collect()
}

/// The runs of output [`offset`, `offset + len`) by stream, in order.
pub fn stderr_ranges(offset: u64, len: u64, tags: &[u8]) -> Vec<(Range<u64>, OutputStream)> {
    let base = offset / 8;
    let stream_at = |at: u64| {
        let byte = tags.get((at / 8 - base) as usize).copied().unwrap_or(0);
        if byte >> (at % 8) & 1 == 1 {
            OutputStream::Stderr
        } else {
            OutputStream::Stdout
        }
    };
    let mut runs: Vec<(Range<u64>, OutputStream)> = Vec::new();
    let end = offset + len;
    let mut at = offset;
    while at < end {
        // A whole bitmap byte of one kind is a run of up to 8 bytes at once.
        let stream = stream_at(at);
        let mut next = at + 1;
        while next < end {
            let byte = tags.get((next / 8 - base) as usize).copied().unwrap_or(0);
            let whole = match stream {
                OutputStream::Stdout => byte == 0,
                OutputStream::Stderr => byte == 0xff,
            };
            if next.is_multiple_of(8) && whole && next + 8 <= end {
                next += 8;
            } else if stream_at(next) == stream {
                next += 1;
            } else {
                break;
            }
        }
        match runs.last_mut() {
            Some((range, s)) if *s == stream && range.end == at => range.end = next,
            _ => runs.push((at..next, stream)),
        }
        at = next;
    }
    runs
}

/// The frames a follow script writes (`POS LEN`, the tags, LEN bytes), read as they come.
#[derive(Debug, Default)]
pub(super) struct Frames {
    buffer: Vec<u8>,
}

/// The longest frame header (`POS LEN` and its line break).
const MAX_HEADER: usize = 48;

impl Frames {
    /// Take more of the script's output; the whole frames in it so far, as pieces by stream,
    /// and where the last one ended. An error for output that is not frames.
    pub fn push(
        &mut self,
        bytes: &[u8],
        most: u64,
    ) -> Result<(Vec<ProcessChunk>, Option<u64>), String> {
        self.buffer.extend_from_slice(bytes);
        let mut pieces = Vec::new();
        let mut reached = None;
        loop {
            let Some(line_end) = self
                .buffer
                .iter()
                .take(MAX_HEADER)
                .position(|&b| b == b'\n')
            else {
                if self.buffer.len() >= MAX_HEADER {
                    return Err("a frame's header is too long".into());
                }
                break;
            };
            let header = std::str::from_utf8(&self.buffer[..line_end]).unwrap_or("");
            let (pos, len) = header
                .split_once(' ')
                .and_then(|(p, l)| Some((p.parse::<u64>().ok()?, l.parse::<u64>().ok()?)))
                .filter(|(p, l)| *l >= 1 && *l <= most && *p <= MAX_OUTPUT_OFFSET - *l)
                .ok_or_else(|| format!("a frame's header is not `POS LEN`: {header:?}"))?;
            let tags = tag_bytes(pos, len) as usize;
            let whole = line_end + 1 + tags + len as usize;
            if self.buffer.len() < whole {
                break;
            }
            let frame: Vec<u8> = self.buffer.drain(..whole).collect();
            let (tag_bits, data) = frame[line_end + 1..].split_at(tags);
            pieces.extend(tagged_pieces(pos, data, tag_bits));
            reached = Some(pos + len);
        }
        Ok((pieces, reached))
    }

    /// Whether a frame was cut off (the script ended in the middle of one).
    pub fn cut(&self) -> bool {
        !self.buffer.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_split_output_by_stream() {
        // Bytes 0..3 stdout, 3..10 stderr, 10..12 stdout, from offset 16.
        let tags = [0b1111_1000, 0b0000_0011];
        let pieces = tagged_pieces(16, b"outERRORS!ok", &tags);
        let got: Vec<(u64, &[u8], OutputStream)> = pieces
            .iter()
            .map(|p| (p.offset, p.data.as_slice(), p.stream))
            .collect();
        assert_eq!(
            got,
            [
                (16, &b"out"[..], OutputStream::Stdout),
                (19, &b"ERRORS!"[..], OutputStream::Stderr),
                (26, &b"ok"[..], OutputStream::Stdout),
            ]
        );
        // From an offset inside a bitmap byte, and with tags missing: stdout.
        let runs = stderr_ranges(13, 5, &[0b1110_0000]);
        assert_eq!(
            runs,
            [
                (13..16, OutputStream::Stderr),
                (16..18, OutputStream::Stdout)
            ]
        );
        assert_eq!(tag_bytes(13, 5), 2);
        assert_eq!(tag_bytes(16, 8), 1);
        assert_eq!(tag_bytes(16, 0), 0);
        // Long runs of one kind come out whole.
        let all_err = vec![0xff; 1024];
        assert_eq!(
            stderr_ranges(0, 8192, &all_err),
            [(0..8192, OutputStream::Stderr)]
        );
        assert_eq!(
            stderr_ranges(0, 8192, &[]),
            [(0..8192, OutputStream::Stdout)]
        );
    }

    #[test]
    fn frames_are_read_as_they_come_and_checked() {
        let mut frames = Frames::default();
        let mut wire = b"8 4\n\x0cabCD".to_vec();
        wire.extend_from_slice(b"20 2\n\x00xy");
        let (pieces, reached) = frames.push(&wire[..7], 64).unwrap();
        assert!(pieces.is_empty() && reached.is_none() && frames.cut());
        let (pieces, reached) = frames.push(&wire[7..], 64).unwrap();
        assert_eq!(reached, Some(22));
        assert!(!frames.cut());
        let got: Vec<(u64, &[u8], OutputStream)> = pieces
            .iter()
            .map(|p| (p.offset, p.data.as_slice(), p.stream))
            .collect();
        assert_eq!(
            got,
            [
                (8, &b"ab"[..], OutputStream::Stdout),
                (10, &b"CD"[..], OutputStream::Stderr),
                (20, &b"xy"[..], OutputStream::Stdout),
            ]
        );
        for bad in [
            &b"x y\n"[..],
            b"1 0\n",
            b"1 65\n",
            b"9223372036854775807 5\n",
            &[b'1'; 60][..],
        ] {
            assert!(Frames::default().push(bad, 64).is_err(), "{bad:?}");
        }
    }
}
