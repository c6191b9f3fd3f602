//! Whether the command can read a readable root, judged before anything
//! runs.
//!
//! An unprivileged caller's command runs as the caller, so a `--read` root
//! is readable to it exactly as to the caller. A root caller's command runs
//! as host `nobody` (uid 65534) without capabilities; its readable roots are
//! cloned by the helper on the host side (as host root, so the path leading
//! to them, `/root` at mode 700 say, is never walked by the command) and
//! idmapped like the workspace: files owned by host root (uid and gid 0)
//! appear owned by the command, so the owner (or group) bits decide for
//! them; files of every other owner are judged by their "other" bits, as
//! `nobody` would be. What this module checks is the top of the root and
//! the directories leading to it that the sandbox takes from another bind:
//! without search (and read) permission there the run could only fail, so
//! it is refused with the path, the command's uid, the mode and the fix.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use portcullis_helper::spec::MountOp;

use super::plan::ROOT_RUNS_AS;
use super::SandboxError;

/// Which permission class applies to the command for one inode.
fn class(meta: &fs::Metadata, idmapped: bool, uid: u32, gid: u32) -> (&'static str, u32) {
    // On an idmapped bind the command is (inside) uid 0 and owns what host
    // root owns; elsewhere it is its host uid.
    let (own_uid, own_gid) = if idmapped { (0, 0) } else { (uid, gid) };
    let mode = meta.mode();
    if meta.uid() == own_uid {
        ("owner", (mode >> 6) & 7)
    } else if meta.gid() == own_gid {
        ("group", (mode >> 3) & 7)
    } else {
        ("other", mode & 7)
    }
}

/// Refuse a readable root the command could not open. `base` holds the
/// binds planned so far (parents first); `idmapped` says whether the root
/// itself will be idmapped; `uid`/`gid` are the command's host ids.
pub(crate) fn check_readable(
    root: &Path,
    base: &[MountOp],
    idmapped: bool,
    uid: u32,
    gid: u32,
) -> Result<(), SandboxError> {
    let refuse = |blocker: &Path, meta: &fs::Metadata, class: &'static str, need: &str, on_idmapped: bool| {
        let who = if uid == ROOT_RUNS_AS && idmapped {
            format!("host uid {uid} (nobody; you run portcullis as root)")
        } else {
            format!("host uid {uid}")
        };
        let who_bit = match class {
            "owner" => "u",
            "group" => "g",
            _ => "o",
        };
        let mut fix = format!("make it readable (chmod {who_bit}+{need} {})", blocker.display());
        if on_idmapped && class == "other" {
            fix.push_str(&format!(
                ", or run portcullis as its owner (uid {}): the idmapped bind makes only root's files the command's",
                meta.uid()
            ));
        }
        SandboxError::ReadRootUnreadable {
            path: root.to_path_buf(),
            reason: format!(
                "the command runs as {who}, and {} (mode {:04o}, owner uid {}, group {}) gives its {class} class no \
                 {} permission; {fix}",
                blocker.display(),
                meta.mode() & 0o7777,
                meta.uid(),
                meta.gid(),
                if need == "x" { "search" } else { "read and search" },
            ),
        }
    };
    // The directories the sandbox takes from an enclosing bind (not from its
    // own root tmpfs, where mount points are 0755): the command and the
    // helper's inner half walk them as the command.
    let path = |b: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(b));
    let outer = base
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind { src, dst, idmap, .. } if src == dst => Some((path(dst), *idmap)),
            _ => None,
        })
        .filter(|(dst, _)| root.starts_with(dst) && dst != root)
        .max_by_key(|(dst, _)| dst.components().count());
    if let Some((outer, outer_idmap)) = outer {
        let mut dirs: Vec<&Path> = root.ancestors().skip(1).take_while(|d| d.starts_with(&outer)).collect();
        dirs.reverse();
        for d in dirs {
            let meta = fs::metadata(d).map_err(|source| SandboxError::Path {
                what: "readable root",
                path: d.to_path_buf(),
                source,
            })?;
            let (c, bits) = class(&meta, outer_idmap, uid, gid);
            if bits & 1 == 0 {
                return Err(refuse(d, &meta, c, "x", outer_idmap));
            }
        }
    }
    let meta = fs::metadata(root).map_err(|source| SandboxError::Path {
        what: "readable root",
        path: root.to_path_buf(),
        source,
    })?;
    let (c, bits) = class(&meta, idmapped, uid, gid);
    let (need, ok) = if meta.is_dir() { ("rx", bits & 5 == 5) } else { ("r", bits & 4 != 0) };
    if !ok {
        return Err(refuse(root, &meta, c, need, idmapped));
    }
    Ok(())
}
