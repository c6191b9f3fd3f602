//! The SHA-256 of each seccomp program the helper installs, computed here
//! once per build instead of in every `portcullis exec`.
//!
//! A plan names the digest of the program its helper will install
//! (`plan::seccomp_sha256`). The program is a pure function of the filter
//! profile (four of them) and of the target architecture, so its digest is a
//! constant of the build. Computed at run time it cost a one-shot command
//! about 90 µs on the project's VM, most of it `sha2`'s CPU-feature probe
//! (eight `cpuid`s, each a trap to the hypervisor) and the program's
//! compilation (docs/sandbox.md, "Session 22").
//!
//! The table is written only when this script runs on the architecture the
//! crate is built for (the helper's filter code, compiled for the build
//! machine here, then produces the target's program); a cross build gets an
//! empty table and computes the digest at run time as before. A unit test
//! (`plan::tests::precomputed_seccomp_digests_match`) compares the table with
//! the run-time computation for every profile.

use std::fmt::Write as _;
use std::path::PathBuf;

use portcullis_helper::filter::{compile_for, program_bytes, Profile};
use sha2::{Digest, Sha256};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=helper/src");
    println!("cargo:rerun-if-changed=helper/Cargo.toml");
    let out = match std::env::var_os("OUT_DIR") {
        Some(d) => PathBuf::from(d).join("seccomp_digests.rs"),
        None => {
            eprintln!("build.rs: cargo set no OUT_DIR");
            std::process::exit(1);
        }
    };
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_width = std::env::var("CARGO_CFG_TARGET_POINTER_WIDTH").unwrap_or_default();
    let native = target_arch == std::env::consts::ARCH
        && target_os == std::env::consts::OS
        && target_width == (usize::BITS).to_string();
    let mut text = String::from(
        "/// The seccomp program's SHA-256 per filter profile (degraded, network_none), \
         computed by build.rs; empty in a cross build.\n\
         pub(super) const SECCOMP_SHA256: &[(bool, bool, &str)] = &[\n",
    );
    if native {
        for degraded in [false, true] {
            for network_none in [false, true] {
                let program = match compile_for(Profile { degraded, network_none }) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("build.rs: the seccomp program of profile {degraded}/{network_none}: {e}");
                        std::process::exit(1);
                    }
                };
                let digest = Sha256::digest(program_bytes(&program));
                let hex = digest.iter().fold(String::new(), |mut s, b| {
                    let _ = write!(s, "{b:02x}");
                    s
                });
                let _ = writeln!(text, "    ({degraded}, {network_none}, \"{hex}\"),");
            }
        }
    }
    text.push_str("];\n");
    if let Err(e) = std::fs::write(&out, text) {
        eprintln!("build.rs: writing {}: {e}", out.display());
        std::process::exit(1);
    }
}
