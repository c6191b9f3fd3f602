//! Host mounts that alias a read-only area into a writable one.
//!
//! The sandbox clones each write grant (and a writable workspace) with every
//! mount beneath it, writable: a host bind of `ws/src` onto `ws/target/view`
//! would make `ws/src` writable through `--write target`, and Landlock's rule
//! on `target` covers it too. A write grant can itself be such an alias
//! (`--write /alias` for a bind of `ws/src`). [`AliasCheck`] reads the caller's
//! `/proc/self/mountinfo` and judges, on each filesystem, the part every
//! writable area and every mount inside one shows (its device and its path
//! within that filesystem) against the part each read-only area of the plan
//! is: where one is, contains or lies inside the other, but not at the path
//! the plan sees it at (`ws/target` inside a read-only `ws` is the plain
//! nesting the read-only binds handle), the run is refused, naming the
//! mount. Mounts that alias nothing read-only (a separate volume, a tmpfs)
//! are left alone.
//!
//! An overlay writes into its upper directory (and its work directory), not
//! through the device it shows: for an overlay at or inside a writable area
//! (and one a writable area lies in), the upper and work directories named
//! in its super options are located the same way and refused when they are,
//! contain or lie inside a read-only area (only plain nesting in a writable
//! area passes: the sandbox writes there anyway). Its lower layers are never
//! written through it. The kernel shows the names the mounter gave: an upper
//! directory of an overlay at or inside a writable area that is relative or
//! cannot be found refuses the run; for an overlay a writable area lies in
//! (a container's root, whose layers live in the host's namespace) it is
//! passed over.
//!
//! Filesystems whose backing directories the kernel does not show (FUSE,
//! NFS, 9p, virtiofs, SMB, eCryptfs, ...) could be a loopback of a read-only
//! area (`bindfs ws/src ws/target/x`): one mounted inside a writable area
//! refuses the run. A grant that is or lies on one is the user's choice and
//! is not judged.
//!
//! The mounts are read while the run is planned, before the plan walks the
//! writable areas (a mount refused here is never walked), and again when
//! the run starts, in the one reading the pool's judgement of a slot uses
//! too (`Sandbox::run_locked`): an alias the host mounts between the plan
//! and the run is refused as well. One made after the run started is not
//! seen (making it needs privileges on the host that a sandboxed command
//! does not have).

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{PathRefusal, SandboxError};
use crate::path::memo;

/// One line of `/proc/self/mountinfo`, borrowing the text it was read from
/// (a path is copied only when mountinfo escaped it: the table is parsed on
/// every writable run's path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount<'t> {
    /// `major:minor` of its filesystem.
    pub dev: &'t str,
    /// The directory of that filesystem it shows.
    pub root: Cow<'t, Path>,
    /// Where it is mounted.
    pub point: Cow<'t, Path>,
    /// Its filesystem type (`overlay`, `fuse.bindfs`, ...).
    pub fstype: &'t str,
    /// Its super options, as mountinfo shows them (still escaped).
    pub opts: &'t str,
}

/// Undo mountinfo's octal escapes (`\040` for a space and so on); the one
/// copy (`cgroup` uses it too).
pub(super) fn unescape_bytes(s: &str) -> Vec<u8> {
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
    out
}

fn unescape(s: &str) -> Cow<'_, Path> {
    if !s.contains('\\') {
        return Cow::Borrowed(Path::new(s));
    }
    Cow::Owned(PathBuf::from(OsStr::from_bytes(&unescape_bytes(s))))
}

/// The directories an overlay writes into, by the names its mounter gave
/// (`upperdir=`, `workdir=`): mountinfo's octal escapes undone, then
/// overlayfs's own (a backslash before `,`, `:` or `\\`). None for an overlay
/// without an upper layer (read-only) or another filesystem.
fn overlay_writes(m: &Mount) -> Vec<(&'static str, PathBuf)> {
    if m.fstype != "overlay" {
        return Vec::new();
    }
    m.opts
        .split(',')
        .filter_map(|o| {
            let (k, v) = o.split_once('=')?;
            let which = match k {
                "upperdir" => "upper directory",
                "workdir" => "work directory",
                _ => return None,
            };
            let raw = unescape_bytes(v);
            let mut out = Vec::with_capacity(raw.len());
            let mut it = raw.iter();
            while let Some(&c) = it.next() {
                out.push(if c == b'\\' { it.next().copied().unwrap_or(c) } else { c });
            }
            Some((which, PathBuf::from(OsStr::from_bytes(&out))))
        })
        .collect()
}

/// Filesystems that keep their files in directories the kernel does not
/// show: a FUSE passthrough (bindfs), an NFS, SMB or 9p loopback, a stacked
/// eCryptfs can each show a read-only area under another device.
fn opaque(fstype: &str) -> bool {
    fstype.starts_with("fuse")
        || matches!(
            fstype,
            "nfs" | "nfs4" | "9p" | "virtiofs" | "cifs" | "smb3" | "smbfs" | "ecryptfs" | "shiftfs" | "aufs" | "coda"
        )
}

/// Parse mountinfo text, in its order (a later mount covers an earlier one
/// at the same point).
pub(crate) fn parse(text: &str) -> Vec<Mount<'_>> {
    text.lines()
        .filter_map(|l| {
            // id parent major:minor root point options [optional fields] -
            // type source super-options
            let mut f = l.split(' ');
            let (_id, _parent) = (f.next()?, f.next()?);
            let (dev, root, point) = (f.next()?, f.next()?, f.next()?);
            let mut rest = f.skip(1);
            rest.by_ref().find(|x| *x == "-")?;
            let fstype = rest.next()?;
            let opts = rest.nth(1).unwrap_or_default();
            Some(Mount { dev, root: unescape(root), point: unescape(point), fstype, opts })
        })
        .collect()
}

/// The mount that shows `p` (the deepest point above it, the last one
/// there), and where `p` lies within its filesystem.
fn locate<'m, 't>(mounts: &'m [Mount<'t>], p: &Path) -> Option<(&'m Mount<'t>, PathBuf)> {
    let m = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| p.starts_with(&m.point))
        .max_by_key(|(i, m)| (m.point.components().count(), *i))
        .map(|(_, m)| m)?;
    let rest = p.strip_prefix(&m.point).ok()?;
    Some((m, if rest.as_os_str().is_empty() { m.root.to_path_buf() } else { m.root.join(rest) }))
}

/// The check of a plan's writable areas against the read-only areas no
/// mount inside them may show (real paths). The plan makes it before its
/// walk of the writable areas ([`AliasCheck::now`]: a mount it refuses, a
/// FUSE mount whose daemon is gone or a bind of a large tree, is never
/// walked); a run makes it again at its start ([`AliasCheck::against`]),
/// against the mount table it reads there once for this and for the pool's
/// judgement of a slot, so that an alias the host mounts after the plan is
/// refused too.
#[derive(Debug, Clone)]
pub(crate) struct AliasCheck {
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
}

impl AliasCheck {
    /// The check of these areas; `None` when there is nothing to judge (no
    /// writable area, or nothing read-only).
    pub(crate) fn new(writable: Vec<PathBuf>, read_only: Vec<PathBuf>) -> Option<AliasCheck> {
        (!writable.is_empty() && !read_only.is_empty()).then_some(AliasCheck { writable, read_only })
    }

    /// Refuse the run when a writable area, or a host mount inside one,
    /// shows a read-only area (or a part of one, or a directory holding
    /// one) at another path: judged against the mount table now.
    pub(crate) fn now(&self) -> Result<(), SandboxError> {
        self.against(&read_table()?)
    }

    /// The same, against `table` (read after the plan was made). The
    /// verdict is the text's and the areas' alone, unless the check looked
    /// at the file system (an overlay's upper or work directory is found by
    /// its path): a check the same areas passed against the same text
    /// without looking is not made again.
    pub(crate) fn against(&self, table: &super::mounts::Snapshot) -> Result<(), SandboxError> {
        let mut passed = PASSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if passed.as_ref().is_some_and(|(text, check)| {
            **text == *table.text && check.writable == self.writable && check.read_only == self.read_only
        }) {
            return Ok(());
        }
        drop(passed);
        let mut looked = false;
        check_looking(&parse(&table.text), &self.writable, &self.read_only, &mut looked)?;
        if !looked {
            passed = PASSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *passed = Some((std::sync::Arc::clone(&table.text), self.clone()));
        }
        Ok(())
    }
}

/// The last check that passed on the mount table's text alone, with that
/// text: a plan and its run, and the next runs of the same shape, judge the
/// same areas against the same table.
static PASSED: std::sync::Mutex<Option<(std::sync::Arc<str>, AliasCheck)>> = std::sync::Mutex::new(None);

/// The mount table for the check, read now ([`super::mounts::now`]; its
/// error names the check's stage).
pub(crate) fn read_table() -> Result<super::mounts::Snapshot, SandboxError> {
    super::mounts::now().map_err(|source| SandboxError::Io {
        stage: "reading /proc/self/mountinfo for mounts inside the grants",
        source,
    })
}

#[cfg(test)]
pub(crate) fn check_with(mounts: &[Mount], writable: &[PathBuf], read_only: &[PathBuf]) -> Result<(), SandboxError> {
    check_looking(mounts, writable, read_only, &mut false)
}

/// The check; `looked` is set when the verdict looked at the file system
/// too (an overlay's directories), not at the table and the areas alone.
fn check_looking(
    mounts: &[Mount],
    writable: &[PathBuf],
    read_only: &[PathBuf],
    looked: &mut bool,
) -> Result<(), SandboxError> {
    // Whether the sandbox writes at `p`: the deepest area above it is a
    // writable one (a read-only one wins a tie: its bind lies over it).
    let writes_at = |p: &Path| {
        let w = writable.iter().filter(|a| p.starts_with(a)).map(|a| a.components().count()).max();
        let r = read_only.iter().filter(|a| p.starts_with(a)).map(|a| a.components().count()).max();
        matches!((w, r), (Some(w), r) if r.map_or(true, |r| w > r))
    };
    let areas: Vec<(&Path, &str, PathBuf)> =
        read_only.iter().filter_map(|a| locate(mounts, a).map(|(m, fs)| (a.as_path(), m.dev, fs))).collect();
    // What each writable area and each mount inside one shows, where, and
    // whether that mount is at or inside the writable area (not above it).
    let mut shown: Vec<(PathBuf, &Mount, bool, &Path, PathBuf)> = Vec::new();
    for w in writable {
        if let Some((m, fs)) = locate(mounts, w) {
            shown.push((w.clone(), m, m.point == *w, w, fs));
        }
        for m in mounts.iter().filter(|m| m.point.starts_with(w) && m.point != *w && writes_at(&m.point)) {
            if opaque(m.fstype) {
                return Err(SandboxError::unsafe_path(
                    m.point.to_path_buf(),
                    PathRefusal::Alias,
                    format!(
                        "the {} mount at {}, inside the writable area {}, keeps its files in directories the kernel \
                     does not show: a write through it could reach a directory this run keeps read-only, and \
                     portcullis cannot tell. Unmount it on the host (umount {}), or mount it outside the writable \
                     areas",
                        m.fstype,
                        m.point.display(),
                        w.display(),
                        m.point.display()
                    ),
                ));
            }
            shown.push((m.point.to_path_buf(), m, true, w, m.root.to_path_buf()));
        }
    }
    let refusal = |what: String, at: &Path, area: &Path, how: &str, ro: &Path, point: &Path| {
        let inside = if at == area {
            "a writable area".to_string()
        } else {
            format!("inside the writable area {}", area.display())
        };
        SandboxError::unsafe_path(
            point.to_path_buf(),
            PathRefusal::Alias,
            format!(
                "{what}, {inside}, {how} {}, which this run keeps read-only: a write through {} would reach it. \
             Unmount the alias on the host (umount {}), or grant {} itself if it should be writable",
                ro.display(),
                at.display(),
                point.display(),
                ro.display()
            ),
        )
    };
    for (at, m, mounted, area, fs) in &shown {
        for (ro, ro_dev, ro_fs) in &areas {
            if m.dev != *ro_dev {
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
            let what = if *mounted {
                format!("the mount at {} (filesystem {}, its directory {})", m.point.display(), m.dev, m.root.display())
            } else {
                format!("{} (filesystem {}, its directory {})", at.display(), m.dev, fs.display())
            };
            let point = if *mounted { m.point.as_ref() } else { at.as_path() };
            return Err(refusal(what, at, area, how, ro, point));
        }
        // An overlay writes into its upper directory (at the part of the
        // overlay `at` shows) and its work directory, past every bind the
        // sandbox lays over those paths.
        for (which, dir) in overlay_writes(m) {
            *looked = true;
            let found = if dir.is_absolute() { memo::canonicalize(&dir).ok() } else { None };
            let Some((real, (dm, dfs))) = found.and_then(|r| locate(mounts, &r).map(|l| (r, l))) else {
                if !*mounted {
                    // A container's root: its layers are named in the host's
                    // namespace, not reachable here.
                    continue;
                }
                return Err(SandboxError::unsafe_path(
                    m.point.to_path_buf(),
                    PathRefusal::Alias,
                    format!(
                        "the overlay mount at {}, {}, writes into the {which} {}, which cannot be found here (the \
                     kernel shows the name it was mounted with): portcullis cannot tell whether it is a \
                     directory this run keeps read-only. Unmount it on the host (umount {}), or mount it again \
                     naming its {which} by an absolute path",
                        m.point.display(),
                        if at == area {
                            "a writable area".to_string()
                        } else {
                            format!("inside the writable area {}", area.display())
                        },
                        dir.display(),
                        m.point.display()
                    ),
                ));
            };
            let sub = match fs.strip_prefix("/") {
                Ok(sub) if which == "upper directory" && !sub.as_os_str().is_empty() => Some(sub),
                _ => None,
            };
            let (path, dfs) = match sub {
                Some(sub) => (real.join(sub), dfs.join(sub)),
                None => (real, dfs),
            };
            for (ro, ro_dev, ro_fs) in &areas {
                if dm.dev != *ro_dev {
                    continue;
                }
                // Only plain nesting in a writable area passes: the sandbox
                // writes there anyway.
                let how = if let Ok(rel) = ro_fs.strip_prefix(&dfs) {
                    Some(if rel.as_os_str().is_empty() { "is" } else { "contains" })
                } else if let Ok(rel) = dfs.strip_prefix(ro_fs) {
                    (ro.join(rel) != path || !writes_at(&path)).then_some("lies inside")
                } else {
                    None
                };
                let Some(how) = how else { continue };
                let what = format!("the overlay mount at {} (its {which} {})", m.point.display(), path.display());
                return Err(refusal(what, at, area, how, ro, &m.point));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m<'a>(dev: &'a str, root: &'a str, point: &'a str) -> Mount<'a> {
        let (root, point) = (Cow::Borrowed(Path::new(root)), Cow::Borrowed(Path::new(point)));
        Mount { dev, root, point, fstype: "ext4", opts: "rw" }
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
            matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("/srv/ws/target/view") && s.contains("lies inside /srv/ws")),
            "{e:?}"
        );
        // A grant that is itself a bind of a read-only directory.
        let mounts = vec![m("8:1", "/", "/"), m("8:1", "/srv/ws/src", "/alias")];
        let e = check_with(&mounts, &p(&["/alias"]), &p(&["/srv/ws"]));
        assert!(
            matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("mount at /alias")),
            "{e:?}"
        );
        // A mount that shows a whole filesystem holding a read root.
        let mounts = vec![m("8:1", "/", "/"), m("8:2", "/", "/data"), m("8:2", "/", "/srv/ws/target/all")];
        let e = check_with(&mounts, &p(&["/srv/ws/target"]), &p(&["/srv/ws", "/data/ref"]));
        assert!(
            matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("contains /data/ref")),
            "{e:?}"
        );
        // A mount under a read-only area inside the grant is read-only itself.
        let mounts = vec![m("8:1", "/", "/"), m("8:1", "/etc", "/srv/data/ws/etc")];
        assert!(check_with(&mounts, &p(&["/srv/data"]), &p(&["/srv/data/ws", "/etc"])).is_ok());
        assert_eq!(unescape("/a\\040b").as_ref(), Path::new("/a b"));
    }

    fn ov<'a>(point: &'a str, opts: &'a str) -> Mount<'a> {
        let (root, point) = (Cow::Borrowed(Path::new("/")), Cow::Borrowed(Path::new(point)));
        Mount { dev: "0:77", root, point, fstype: "overlay", opts }
    }

    #[test]
    fn mountinfo_lines_and_overlay_options_are_unescaped() {
        let text = "47 27 0:40 / /tmp/ovt/m rw,relatime shared:5 - overlay overlay \
                    rw,lowerdir=/tmp/ovt/lo\\134:w,upperdir=/tmp/ovt/u\\040p\\134\\054x\\134\\134y,workdir=/w,uuid=on\n\
                    48 27 8:1 /a\\040b /mnt rw - ext4 /dev/sda1 rw";
        let ms = parse(text);
        assert_eq!(ms.len(), 2);
        assert_eq!((ms[0].fstype, ms[1].fstype), ("overlay", "ext4"));
        assert_eq!(ms[1].root, PathBuf::from("/a b"));
        assert_eq!(
            overlay_writes(&ms[0]),
            vec![("upper directory", PathBuf::from("/tmp/ovt/u p,x\\y")), ("work directory", PathBuf::from("/w"))]
        );
        assert!(overlay_writes(&ms[1]).is_empty());
        // Read-only overlay: nothing written.
        assert!(overlay_writes(&ov("/x", "ro,lowerdir=/a:/b")).is_empty());
        // Several optional fields; no source nor super options; no super
        // options; a line without the separator (skipped).
        let text = "1 0 0:5 / /p rw shared:1 master:2 propagate_from:3 - proc none rw\n\
                    2 1 0:6 / /q rw - tmpfs\n\
                    3 1 0:7 / /r rw - tmpfs none\n\
                    4 1 0:8 / /s rw shared:4";
        let ms = parse(text);
        assert_eq!(ms.len(), 3, "{ms:?}");
        assert_eq!((ms[0].dev, ms[0].fstype, ms[0].opts), ("0:5", "proc", "rw"));
        assert_eq!((ms[1].point.as_ref(), ms[1].fstype, ms[1].opts), (Path::new("/q"), "tmpfs", ""));
        assert_eq!((ms[2].point.as_ref(), ms[2].fstype, ms[2].opts), (Path::new("/r"), "tmpfs", ""));
    }

    #[test]
    fn overlays_writing_into_read_only_areas_and_opaque_mounts_are_refused() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let base = std::fs::canonicalize(t.path()).unwrap_or_else(|e| panic!("{e}"));
        for d in ["ws/src/.git", "ws/target/up", "ws/target/ov", "work", "low"] {
            std::fs::create_dir_all(base.join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        let b = |s: &str| base.join(s).display().to_string();
        let writable = vec![base.join("ws/target")];
        let ro = vec![base.join("ws"), base.join("ws/target/up/keep")];
        fn with(o: Mount<'_>) -> Vec<Mount<'_>> {
            vec![m("8:1", "/", "/"), o]
        }
        let opts = |up: &str, work: &str| format!("rw,lowerdir={},upperdir={up},workdir={work}", b("low"));
        let ovp = b("ws/target/ov");
        // The upper directory is the read-only src/: refused.
        let e = check_with(&with(ov(&ovp, &opts(&b("ws/src"), &b("work")))), &writable, &ro);
        assert!(
            matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("overlay mount at") && s.contains("upper directory") && s.contains("keeps read-only")),
            "{e:?}"
        );
        // The work directory inside a read-only area: refused.
        let ro2 = vec![base.join("ws")];
        let e = check_with(&with(ov(&ovp, &opts(&b("ws/target/up"), &b("ws/src/.git")))), &writable, &ro2);
        assert!(
            matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("work directory")),
            "{e:?}"
        );
        // An upper directory holding a read-only area (at its own path): refused.
        std::fs::create_dir_all(base.join("ws/target/up/keep")).unwrap_or_else(|e| panic!("{e}"));
        let e = check_with(&with(ov(&ovp, &opts(&b("ws/target/up"), &b("work")))), &writable, &ro);
        assert!(matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("contains")), "{e:?}");
        // Control: upper in the writable area, nothing read-only in it.
        assert!(check_with(&with(ov(&ovp, &opts(&b("ws/target/up"), &b("work")))), &writable, &ro2).is_ok());
        // A relative or vanished upper directory inside a grant: refused;
        // the same overlay above the grant (a container's root): passed over.
        for up in ["up", "/nonexistent/pc-upper"] {
            let e = check_with(&with(ov(&ovp, &opts(up, &b("work")))), &writable, &ro2);
            assert!(
                matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("cannot be found")),
                "{e:?}"
            );
            let o = opts(up, "/nonexistent/pc-work");
            let root = vec![ov("/", &o)];
            assert!(check_with(&root, &writable, &ro2).is_ok());
        }
        // A grant lying inside an overlay whose upper is src/: the part it shows.
        let e = check_with(
            &with(ov(&b("ov2"), &opts(&b("ws/src"), &b("work")))),
            &[base.join("ov2/sub")],
            &[base.join("ws/src/sub")],
        );
        assert!(matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains("is ")), "{e:?}");
        // A FUSE or NFS mount inside a grant: refused, naming it; one the
        // grant lies on: not judged.
        for t in ["fuse.bindfs", "nfs4", "9p"] {
            let fuse = Mount { fstype: t, ..m("0:88", "/", &ovp) };
            let e = check_with(&with(fuse.clone()), &writable, &ro2);
            assert!(
                matches!(&e, Err(SandboxError::UnsafePath { message: s, .. }) if s.contains(t) && s.contains("umount")),
                "{e:?}"
            );
            let above = Mount { point: base.clone().into(), ..fuse };
            assert!(check_with(&[m("8:1", "/", "/"), above], &writable, &[base.join("ws/src")]).is_ok());
        }
    }
}
