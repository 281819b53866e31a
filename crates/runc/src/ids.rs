//! Sandbox ids and host names.
//!
//! A sandbox id names a directory under the state directory and a runc container, so every id
//! that comes in is checked against the exact shape we hand out before it touches either.

use threadbox_core::ports::ProviderError;

const PREFIX: &str = "rc-";
const HEX_LEN: usize = 12;

/// A fresh id: `rc-` and 12 lowercase hex digits (48 random bits).
pub(crate) fn new_sandbox_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("{PREFIX}{}", &hex[..HEX_LEN])
}

/// Refuse anything that is not exactly an id we could have made, so no id can become a path
/// (`..`, `/`) or a runc flag (`-x`).
pub(crate) fn validate_sandbox_id(id: &str) -> Result<(), ProviderError> {
    let ok = id.strip_prefix(PREFIX).is_some_and(|hex| {
        hex.len() == HEX_LEN && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    });
    if ok {
        Ok(())
    } else {
        Err(ProviderError::InvalidRequest(format!(
            "malformed sandbox id {id:?}: runc sandbox ids look like rc-0123456789ab"
        )))
    }
}

/// The sandbox's host name, derived from its thread so `hostname` inside tells where you are:
/// `tb-` and a slug of the thread id, then a short hash so two threads whose slugs collide (or
/// are cut at the same place) still differ. At most 52 characters, within the 63 allowed.
pub(crate) fn hostname_for(thread_id: &str) -> String {
    let mut slug = String::new();
    for c in thread_id.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= 40 {
            break;
        }
    }
    let hash = fnv1a(thread_id.as_bytes()) as u32;
    match slug.trim_matches('-') {
        "" => format!("tb-{hash:08x}"),
        slug => format!("tb-{slug}-{hash:08x}"),
    }
}

/// FNV-1a: a stable hash (std's hasher may change between releases, and the name is persisted).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_validate() {
        for _ in 0..100 {
            let id = new_sandbox_id();
            assert_eq!(id.len(), 15);
            validate_sandbox_id(&id).unwrap();
        }
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            "",
            "rc-",
            "rc-0123456789a",
            "rc-0123456789abc",
            "rc-0123456789AB",
            "rc-../../etc/x",
            "xx-0123456789ab",
            "-rc-0123456789a",
            "rc-0123456789a/",
        ] {
            assert!(
                matches!(
                    validate_sandbox_id(bad),
                    Err(ProviderError::InvalidRequest(_))
                ),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn hostnames_are_valid_and_distinct() {
        let a = hostname_for("slack:T0123:C0456:1712345678.123456");
        assert!(
            a.starts_with("tb-slack-t0123-c0456-1712345678-123456-"),
            "{a}"
        );
        let long_a = hostname_for(&format!("{}a", "x".repeat(120)));
        let long_b = hostname_for(&format!("{}b", "x".repeat(120)));
        assert_ne!(long_a, long_b);
        for h in [a, long_a, long_b, hostname_for("::")] {
            assert!(h.len() <= 63, "{h}");
            assert!(h
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            assert!(!h.contains("--"), "{h}");
        }
    }
}
