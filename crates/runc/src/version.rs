//! Is this runc fixed against the container escapes we know? Checked when the provider opens,
//! so threadbox never runs hostile code on a runtime with a published escape unless the operator
//! says so (`RuncConfig::allow_unpatched_runtime`).
//!
//! Distributions backport fixes without changing runc's own version (Debian 12's runc says 1.1.5
//! and carries the CVE-2024-21626 fix from `1.1.5+ds1-1+deb12u1`), so a runtime counts as fixed
//! when its upstream version has the fix, or when the binary belongs to a dpkg package whose
//! version is at least one known to carry it (compared by dpkg itself, whose ordering rules are
//! the authority). Add an escape to [`ESCAPES`] when one is published.

use std::path::Path;
use std::process::Command;

/// A published container escape and the versions that fix it.
#[derive(Debug, PartialEq, Eq)]
pub struct Escape {
    pub cve: &'static str,
    pub what: &'static str,
    /// The first upstream release with the fix.
    pub fixed_upstream: (u32, u32, u32),
    /// dpkg package versions known to carry a backported fix; a later version of the same
    /// package does too.
    pub fixed_packages: &'static [&'static str],
}

pub const ESCAPES: &[Escape] = &[Escape {
    cve: "CVE-2024-21626",
    what: "a file descriptor leaked into the container gives access to the host's filesystem",
    fixed_upstream: (1, 1, 12),
    fixed_packages: &["1.1.5+ds1-1+deb12u1"],
}];

/// What we know of the runtime in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// `runc --version`'s first line, e.g. `runc version 1.1.5+ds1`.
    pub reported: String,
    pub upstream: Option<(u32, u32, u32)>,
    /// The dpkg package version of the binary, when a package installed it.
    pub package: Option<String>,
}

impl RuntimeVersion {
    /// Read the upstream version from `runc --version`'s first line, and ask dpkg whether a
    /// package installed `binary` (and at which version).
    pub fn probe(binary: &Path, reported: &str) -> Self {
        Self {
            reported: reported.to_owned(),
            upstream: parse_upstream(reported),
            package: dpkg_package_version(binary),
        }
    }

    /// The known escapes this runtime is not fixed against.
    pub fn unfixed(&self, package_at_least: impl Fn(&str, &str) -> bool) -> Vec<&'static Escape> {
        ESCAPES
            .iter()
            .filter(|escape| {
                let upstream_fixed = self
                    .upstream
                    .is_some_and(|version| version >= escape.fixed_upstream);
                let package_fixed = self.package.as_deref().is_some_and(|installed| {
                    escape
                        .fixed_packages
                        .iter()
                        .any(|fixed| package_at_least(installed, fixed))
                });
                !(upstream_fixed || package_fixed)
            })
            .collect()
    }
}

/// `runc version 1.1.5+ds1` → (1, 1, 5).
fn parse_upstream(reported: &str) -> Option<(u32, u32, u32)> {
    let version = reported.split_whitespace().nth(2)?;
    let core = version.split(['+', '-', '~']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The version of the dpkg package that installed `binary`, if any.
fn dpkg_package_version(binary: &Path) -> Option<String> {
    let binary = binary.canonicalize().ok()?;
    let owner = Command::new("dpkg").arg("-S").arg(&binary).output().ok()?;
    if !owner.status.success() {
        return None;
    }
    let owner = String::from_utf8_lossy(&owner.stdout);
    let package = owner.split(':').next()?.trim().to_owned();
    let version = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", &package])
        .output()
        .ok()?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    (!version.is_empty()).then_some(version)
}

/// dpkg's own ordering: `installed >= wanted`. False when dpkg cannot say.
pub fn dpkg_at_least(installed: &str, wanted: &str) -> bool {
    Command::new("dpkg")
        .args(["--compare-versions", installed, "ge", wanted])
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(reported: &str, package: Option<&str>) -> RuntimeVersion {
        RuntimeVersion {
            reported: reported.to_owned(),
            upstream: parse_upstream(reported),
            package: package.map(str::to_owned),
        }
    }

    #[test]
    fn upstream_versions_parse() {
        assert_eq!(parse_upstream("runc version 1.1.5+ds1"), Some((1, 1, 5)));
        assert_eq!(parse_upstream("runc version 1.2.0-rc.1"), Some((1, 2, 0)));
        assert_eq!(parse_upstream("runc version 1.1"), Some((1, 1, 0)));
        assert_eq!(parse_upstream("something else"), None);
    }

    #[test]
    fn a_runtime_is_fixed_by_its_upstream_version_or_its_package() {
        let never = |_: &str, _: &str| false;
        let unfixed = runtime("runc version 1.1.5", None).unfixed(never);
        assert_eq!(unfixed.len(), 1);
        assert_eq!(unfixed[0].cve, "CVE-2024-21626");
        assert!(runtime("runc version 1.1.12", None)
            .unfixed(never)
            .is_empty());
        assert!(runtime("runc version 1.2.3", None)
            .unfixed(never)
            .is_empty());
        let debian = runtime("runc version 1.1.5+ds1", Some("1.1.5+ds1-1+deb12u1"));
        assert!(debian.unfixed(|a, b| a == b).is_empty());
        assert_eq!(debian.unfixed(never).len(), 1, "unknown package: not fixed");
        assert_eq!(runtime("garbage", None).unfixed(never).len(), 1);
    }

    #[test]
    fn dpkg_orders_debian_versions() {
        if Command::new("dpkg").arg("--version").output().is_err() {
            eprintln!("SKIPPED: no dpkg on this machine");
            return;
        }
        assert!(dpkg_at_least("1.1.5+ds1-1+deb12u1", "1.1.5+ds1-1+deb12u1"));
        assert!(dpkg_at_least("1.1.5+ds1-1+deb12u2", "1.1.5+ds1-1+deb12u1"));
        assert!(dpkg_at_least("1.1.15+ds1-2", "1.1.5+ds1-1+deb12u1"));
        assert!(!dpkg_at_least("1.1.5+ds1-1", "1.1.5+ds1-1+deb12u1"));
    }
}
