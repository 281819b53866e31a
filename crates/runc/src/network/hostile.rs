//! Generated hostile input for the property tests of the parsers that read what a sandbox sends
//! and that stay hand-written (the DNS resolver's, the ClientHello's server name, a `Host`'s
//! port): a seeded generator, so a failure names its seed and replays, with no crate of its own.

/// splitmix64: small, fast, and the same sequence for the same seed everywhere.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// A host name: mostly well-formed labels, sometimes with bytes no name has.
    pub fn name(&mut self) -> String {
        const GOOD: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
        const BAD: &[u8] = b" .:[]\x00\x7f\xff/\\@%*";
        let labels = 1 + self.below(4);
        let mut name = Vec::new();
        for i in 0..labels {
            if i > 0 {
                name.push(b'.');
            }
            for _ in 0..1 + self.below(12) {
                let set = if self.below(20) == 0 { BAD } else { GOOD };
                let at = self.below(set.len());
                name.push(set[at]);
            }
        }
        String::from_utf8_lossy(&name).into_owned()
    }

    /// `valid`, spoiled one of the ways a hostile peer would: a byte changed (to a random
    /// value or a boundary one), cut short, a byte inserted or taken out, a range repeated,
    /// random bytes added; sometimes twice over.
    pub fn mutate(&mut self, valid: &[u8]) -> Vec<u8> {
        let mut out = valid.to_vec();
        for _ in 0..1 + self.below(2) {
            if out.is_empty() {
                let len = 1 + self.below(16);
                out = self.bytes(len);
                continue;
            }
            let at = self.below(out.len());
            match self.below(7) {
                0 => out[at] = self.next() as u8,
                1 => {
                    let edge = self.below(6);
                    out[at] = [0, 0xFF, 0x80, 0x7F, 0x3F, 0xC0][edge];
                }
                2 => out.truncate(at),
                3 => out.insert(at, self.next() as u8),
                4 => {
                    out.remove(at);
                }
                5 => {
                    let end = (at + 1 + self.below(32)).min(out.len());
                    let range = out[at..end].to_vec();
                    out.splice(at..at, range);
                }
                _ => {
                    let len = 1 + self.below(64);
                    let more = self.bytes(len);
                    out.extend_from_slice(&more);
                }
            }
        }
        out
    }
}
