//! Builds the in-sandbox command runner (`runner/main.rs`), which the provider embeds and
//! starts as every container's init (see `src/runner.rs`).
//!
//! It is compiled apart from the workspace, by the same `rustc`, as one std-only file linked
//! statically: a container's root may be an image with another C library, or none. Without the
//! `command-runner` feature (the Lambda functions, which run E2B in production) nothing is
//! built. A mistake in the runner's code stops the build with rustc's own words. Where only the
//! static link fails (a host without the C library's static archive, `libc.a`) or the build is
//! a cross build (`cargo lambda build --arm64` with the feature on), the provider embeds nothing
//! and says so at open, this build warns, and commands start through `runc exec`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SOURCE: &str = "runner/main.rs";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let binary = out.join("threadbox-runner");
    if env::var_os("CARGO_FEATURE_COMMAND_RUNNER").is_none() {
        return embed_nothing(&binary);
    }
    let (target, host) = (env::var("TARGET"), env::var("HOST"));
    if target.is_err() || target != host {
        warn("this is a cross build, and the runner is built for the host only");
        return embed_nothing(&binary);
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let compile = |extra: &[&str], output: &Path| -> Output {
        Command::new(&rustc)
            .args([
                "--edition",
                "2021",
                "--crate-name",
                "threadbox_runner",
                "--crate-type",
                "bin",
            ])
            .args([
                "-C",
                "opt-level=2",
                "-C",
                "panic=abort",
                "-C",
                "strip=symbols",
            ])
            .args(["-C", "target-feature=+crt-static", "-C", "codegen-units=1"])
            .args(extra)
            .arg("-o")
            .arg(output)
            .arg(SOURCE)
            .output()
            .expect("cargo's rustc runs")
    };
    // The code first, without linking: an error there is the runner's, and stops the build.
    let checked = compile(&["--emit=metadata"], &out.join("threadbox-runner.rmeta"));
    if !checked.status.success() {
        panic!(
            "the sandbox's command runner ({SOURCE}) does not compile:\n{}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }
    // The C toolchain's own linker first: rust-lld, the default since Rust 1.90, has been seen
    // to crash linking this static binary now and then. A toolchain that does not know the
    // option gets its default linker.
    let mut linked = compile(&["-C", "linker-features=-lld"], &binary);
    if !linked.status.success() {
        linked = compile(&[], &binary);
    }
    if !linked.status.success() {
        let said = String::from_utf8_lossy(&linked.stderr);
        let last = said
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        warn(&format!(
            "it could not be linked statically (is the C library's static archive, libc.a, \
             installed? on Debian it is in libc6-dev, on Fedora glibc-static): {last}"
        ));
        embed_nothing(&binary);
    }
}

fn warn(why: &str) {
    println!(
        "cargo:warning=no sandbox command runner in this build, so commands start through \
         `runc exec`: {why}"
    );
}

fn embed_nothing(binary: &Path) {
    std::fs::write(binary, b"").expect("OUT_DIR is writable");
}
