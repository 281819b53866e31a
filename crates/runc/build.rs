//! Builds the in-sandbox command runner (`runner/main.rs`), which the provider embeds and
//! starts as every container's init (see `src/runner.rs`).
//!
//! It is compiled apart from the workspace, by the same `rustc`, as one std-only file linked
//! statically: a container's root may be an image with another C library, or none. Without the
//! `command-runner` feature (the Lambda functions, which run E2B in production), or where it
//! cannot be built (a cross build, as `cargo lambda build --arm64` is, or a host without a
//! static C library), the provider embeds nothing and says so at open, and commands start
//! through `runc exec`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=runner/main.rs");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let binary = out.join("threadbox-runner");
    let (target, host) = (env::var("TARGET"), env::var("HOST"));
    let wanted = env::var_os("CARGO_FEATURE_COMMAND_RUNNER").is_some();
    if !wanted || target.is_err() || target != host {
        std::fs::write(&binary, b"").expect("OUT_DIR is writable");
        return;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let build = |linker: &[&str]| {
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
            .args(linker)
            .arg("-o")
            .arg(&binary)
            .arg("runner/main.rs")
            .status()
    };
    // The C toolchain's own linker first: rust-lld, the default since Rust 1.90, has been seen
    // to crash linking this static binary now and then. A toolchain that does not know the
    // option gets its default linker.
    let mut built = build(&["-C", "linker-features=-lld"]);
    if !matches!(&built, Ok(status) if status.success()) {
        built = build(&[]);
    }
    match built {
        Ok(status) if status.success() => {}
        failed => {
            println!(
                "cargo:warning=the sandbox command runner could not be built statically \
                 ({failed:?}; is the C library's static archive, libc.a, installed?): \
                 commands will start through `runc exec`"
            );
            std::fs::write(&binary, b"").expect("OUT_DIR is writable");
        }
    }
}
