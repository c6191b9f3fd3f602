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
//!
//! The programs themselves go to a second file the helper binary (a target
//! of this package) includes: the main program and the one with the
//! refused-write observer's watches folded in, per profile. The helper
//! compiled both on every start (about 35 µs of each command's setup, and
//! of every pre-made sandbox); `tests::precompiled_programs_match` in
//! helper/src/main.rs compares them with what its code compiles.

use std::fmt::Write as _;
use std::path::PathBuf;

use portcullis_helper::filter::{compile_for, program_bytes, Profile};
use seccompiler::sock_filter;
use sha2::{Digest, Sha256};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=helper/src");
    println!("cargo:rerun-if-changed=helper/Cargo.toml");
    let dir = match std::env::var_os("OUT_DIR") {
        Some(d) => PathBuf::from(d),
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
    let mut programs = String::from(
        "/// Per filter profile (degraded, network_none): the main seccomp program and\n\
         /// the one with the observer's watches folded in, compiled by build.rs; empty\n\
         /// in a cross build.\n\
         pub(crate) type Program = &'static [::seccompiler::sock_filter];\n\
         pub(crate) const PROGRAMS: &[((bool, bool), Program, Program)] = &[\n",
    );
    if native {
        for degraded in [false, true] {
            for network_none in [false, true] {
                let profile = Profile { degraded, network_none };
                let compiled = compile_for(profile)
                    .and_then(|main| Ok((main, portcullis_helper::observe::compile_with(profile)?)));
                let (program, folded) = match compiled {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("build.rs: the seccomp program of profile {degraded}/{network_none}: {e}");
                        std::process::exit(1);
                    }
                };
                let _ = writeln!(
                    programs,
                    "    (({degraded}, {network_none}), &[{}], &[{}]),",
                    literal(&program),
                    literal(&folded)
                );
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
    programs.push_str("];\n");
    for (name, body) in [("seccomp_digests.rs", text), ("seccomp_programs.rs", programs)] {
        let out = dir.join(name);
        if let Err(e) = std::fs::write(&out, body) {
            eprintln!("build.rs: writing {}: {e}", out.display());
            std::process::exit(1);
        }
    }
}

/// A program as the elements of a `sock_filter` array literal.
fn literal(program: &[sock_filter]) -> String {
    program.iter().fold(String::new(), |mut s, i| {
        let _ = write!(s, "::seccompiler::sock_filter{{code:{},jt:{},jf:{},k:{}}},", i.code, i.jt, i.jf, i.k);
        s
    })
}
