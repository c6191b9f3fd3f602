//! Host mounts that alias a read-only area into a writable one.
//!
//! The sandbox clones each write grant (and a writable workspace) with every
//! mount beneath it, writable: a host bind of `ws/src` onto `ws/target/view`
//! would make `ws/src` writable through `--write target`, and Landlock's rule
//! on `target` covers it too. A write grant can itself be such an alias
//! (`--write /alias` for a bind of `ws/src`). [`check`] reads the caller's
//! `/proc/self/mountinfo` and judges, on each filesystem, the part every
//! writable area and every mount inside one shows (its device and its path
//! within that filesystem) against the part each read-only area of the plan
//! is: where one is, contains or lies inside the other, but not at the path
//! the plan sees it at (`ws/target` inside a read-only `ws` is the plain
//! nesting the read-only binds handle), the run is refused, naming the
//! mount. Mounts that alias nothing read-only (a separate volume, a tmpfs)
//! are left alone.
//!
//! The mounts are read while the run is planned; one the host adds between
//! the plan and the run is not seen (making it needs privileges on the host
//! that a sandboxed command does not have).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::SandboxError;

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// `major:minor` of its filesystem.
    pub dev: String,
    /// The directory of that filesystem it shows.
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
}

/// Undo mountinfo's octal escapes (`\040` for a space and so on).
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = b[i + 1..i + 4].iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(u8::try_from(v).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

/// Parse mountinfo text, in its order (a later mount covers an earlier one
/// at the same point).
pub(crate) fn parse(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some(Mount { dev: (*f.get(2)?).to_string(), root: unescape(f.get(3)?), point: unescape(f.get(4)?) })
        })
        .collect()
}

/// The mount that shows `p` (the deepest point above it, the last one
/// there), and where `p` lies within its filesystem.
fn locate<'m>(mounts: &'m [Mount], p: &Path) -> Option<(&'m Mount, PathBuf)> {
    let m = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| p.starts_with(&m.point))
        .max_by_key(|(i, m)| (m.point.components().count(), *i))
        .map(|(_, m)| m)?;
    let rest = p.strip_prefix(&m.point).ok()?;
    Some((m, if rest.as_os_str().is_empty() { m.root.clone() } else { m.root.join(rest) }))
}

/// Refuse the run when a writable area, or a host mount inside one, shows a
/// read-only area (or a part of one, or a directory holding one) at another
/// path. `writable` and `read_only` are real paths.
pub fn check(writable: &[PathBuf], read_only: &[PathBuf]) -> Result<(), SandboxError> {
    if writable.is_empty() || read_only.is_empty() {
        return Ok(());
    }
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| SandboxError::Io {
        stage: "reading /proc/self/mountinfo for mounts inside the grants",
        source,
    })?;
    check_with(&parse(&text), writable, read_only)
}

pub(crate) fn check_with(mounts: &[Mount], writable: &[PathBuf], read_only: &[PathBuf]) -> Result<(), SandboxError> {
    // Whether the sandbox writes at `p`: the deepest area above it is a
    // writable one (a read-only one wins a tie: its bind lies over it).
    let writes_at = |p: &Path| {
        let w = writable.iter().filter(|a| p.starts_with(a)).map(|a| a.components().count()).max();
        let r = read_only.iter().filter(|a| p.starts_with(a)).map(|a| a.components().count()).max();
        matches!((w, r), (Some(w), r) if r.map_or(true, |r| w > r))
    };
    let areas: Vec<(&Path, String, PathBuf)> =
        read_only.iter().filter_map(|a| locate(mounts, a).map(|(m, fs)| (a.as_path(), m.dev.clone(), fs))).collect();
    // What each writable area and each mount inside one shows, and where.
    let mut shown: Vec<(PathBuf, Option<&Mount>, &Path, String, PathBuf)> = Vec::new();
    for w in writable {
        if let Some((m, fs)) = locate(mounts, w) {
            shown.push((w.clone(), (m.point == *w).then_some(m), w, m.dev.clone(), fs));
        }
        for m in mounts.iter().filter(|m| m.point.starts_with(w) && m.point != *w && writes_at(&m.point)) {
            shown.push((m.point.clone(), Some(m), w, m.dev.clone(), m.root.clone()));
        }
    }
    for (at, mount, area, dev, fs) in &shown {
        for (ro, ro_dev, ro_fs) in &areas {
            if dev != ro_dev {
                continue;
            }
            // The read-only area lies inside what `at` shows, or holds it.
            let how = if let Ok(rel) = ro_fs.strip_prefix(fs) {
                (at.join(rel) != *ro).then_some(if rel.as_os_str().is_empty() { "is" } else { "contains" })
            } else if let Ok(rel) = fs.strip_prefix(ro_fs) {
                (ro.join(rel) != *at).then_some("lies inside")
            } else {
                None
            };
            let Some(how) = how else { continue };
            let what = match mount {
                Some(m) => format!(
                    "the mount at {} (filesystem {}, its directory {})",
                    m.point.display(),
                    m.dev,
                    m.root.display()
                ),
                None => format!("{} (filesystem {dev}, its directory {})", at.display(), fs.display()),
            };
            let inside = if at.as_path() == *area {
                "a writable area".to_string()
            } else {
                format!("inside the writable area {}", area.display())
            };
            return Err(SandboxError::BadRequest(format!(
                "{what}, {inside}, {how} {}, which this run keeps read-only: a write through {} would reach it. \
                 Unmount the alias on the host (umount {}), or grant {} itself if it should be writable",
                ro.display(),
                at.display(),
                mount.map_or(at.as_path(), |m| m.point.as_path()).display(),
                ro.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(dev: &str, root: &str, point: &str) -> Mount {
        Mount { dev: dev.into(), root: root.into(), point: point.into() }
    }

    fn p(s: &[&str]) -> Vec<PathBuf> {
        s.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn aliases_of_read_only_areas_are_found_and_plain_nesting_is_not() {
        let mounts = vec![
            m("8:1", "/", "/"),
            m("0:5", "/", "/srv/ws/target/tmp"),
            m("8:1", "/srv/ws/src", "/srv/ws/target/view"),
        ];
        // Plain nesting and a tmpfs: fine.
        assert!(check_with(&mounts[..2], &p(&["/srv/ws/target"]), &p(&["/srv/ws", "/usr"])).is_ok());
        // A bind of src/ inside target/.
        let e = check_with(&mounts, &p(&["/srv/ws/target"]), &p(&["/srv/ws", "/usr"]));
        assert!(
            matches!(&e, Err(SandboxError::BadRequest(s)) if s.contains("/srv/ws/target/view") && s.contains("lies inside /srv/ws")),
            "{e:?}"
        );
        // A grant that is itself a bind of a read-only directory.
        let mounts = vec![m("8:1", "/", "/"), m("8:1", "/srv/ws/src", "/alias")];
        let e = check_with(&mounts, &p(&["/alias"]), &p(&["/srv/ws"]));
        assert!(matches!(&e, Err(SandboxError::BadRequest(s)) if s.contains("mount at /alias")), "{e:?}");
        // A mount that shows a whole filesystem holding a read root.
        let mounts = vec![m("8:1", "/", "/"), m("8:2", "/", "/data"), m("8:2", "/", "/srv/ws/target/all")];
        let e = check_with(&mounts, &p(&["/srv/ws/target"]), &p(&["/srv/ws", "/data/ref"]));
        assert!(matches!(&e, Err(SandboxError::BadRequest(s)) if s.contains("contains /data/ref")), "{e:?}");
        // A mount under a read-only area inside the grant is read-only itself.
        let mounts = vec![m("8:1", "/", "/"), m("8:1", "/etc", "/srv/data/ws/etc")];
        assert!(check_with(&mounts, &p(&["/srv/data"]), &p(&["/srv/data/ws", "/etc"])).is_ok());
        assert_eq!(unescape("/a\\040b"), PathBuf::from("/a b"));
    }
}
