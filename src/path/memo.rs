//! Path lookups remembered for the length of one plan.
//!
//! Planning a run asks the filesystem the same questions many times: the
//! workspace's real path, whether `.git` is a directory, what a link on the
//! way to a protected file points at, the text of `.git/config`. Each of
//! those is a path walk in the kernel (a `realpath` is one `readlink` per
//! component), and a writable run in a git workspace made some 150 of them
//! per plan, most of them repeats. Inside a [`Scope`] the functions here
//! answer a repeated question from the first answer; outside one they are
//! the plain `std::fs` calls.
//!
//! A plan is a snapshot of the tree taken at one moment; remembering the
//! answers makes it a consistent one. Every answer is still one the
//! filesystem gave during this plan; what changes is only that a path
//! asked twice gets its first answer again, where before a change made to
//! it while the plan was being made (a window of a millisecond) could be
//! seen by a later part of the plan and not by an earlier one: a race the
//! plan was exposed to either way, and bounded the same way (a run that writes is planned under the workspace's lock; the
//! helper opens bind sources with `RESOLVE_NO_SYMLINKS` and walks
//! destinations with `O_NOFOLLOW`). A scope lives on one thread and is not
//! `Send`; `plan::build`, the one place that enters it, is synchronous,
//! so it is never held across an `.await` (a `LocalSet` would allow that;
//! nothing here uses one). It ends with the plan, so the next plan asks
//! the filesystem again. Errors the kernel gave are
//! remembered as their errno; any other error is not remembered.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::hash::Hash;
use std::io;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// The tables, keyed by the path's bytes as given: `Path`'s own equality
/// is by component, so `x/`, `x/.` and `x` would be one key, where the
/// kernel answers them differently (a trailing `/` follows a link, and
/// fails on a file).
#[derive(Default)]
struct Memo {
    lstat: HashMap<OsString, Result<fs::Metadata, i32>>,
    stat: HashMap<OsString, Result<fs::Metadata, i32>>,
    link: HashMap<OsString, Result<PathBuf, i32>>,
    real: HashMap<OsString, Result<PathBuf, i32>>,
    text: HashMap<(OsString, bool), Result<Option<String>, i32>>,
}

fn key(p: &Path) -> OsString {
    p.as_os_str().to_os_string()
}

thread_local! {
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

/// While it lives, this thread's lookups through this module are
/// remembered. Scopes nest: only the outermost one forgets on drop.
#[must_use = "the lookups are remembered only while the scope lives"]
pub struct Scope {
    owner: bool,
    _not_send: PhantomData<*const ()>,
}

/// Start remembering (see [`Scope`]).
pub fn scope() -> Scope {
    let owner = MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.is_some() {
            false
        } else {
            *m = Some(Memo::default());
            true
        }
    });
    Scope { owner, _not_send: PhantomData }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.owner {
            MEMO.with(|m| *m.borrow_mut() = None);
        }
    }
}

/// Forget what this thread's scope knows of `p` and of every path that
/// begins with its bytes: for a directory the plan itself creates.
pub fn forget(p: &Path) {
    let prefix = p.as_os_str().as_encoded_bytes();
    let gone = |k: &OsString| k.as_encoded_bytes().starts_with(prefix);
    MEMO.with(|m| {
        if let Some(memo) = m.borrow_mut().as_mut() {
            memo.lstat.retain(|k, _| !gone(k));
            memo.stat.retain(|k, _| !gone(k));
            memo.link.retain(|k, _| !gone(k));
            memo.real.retain(|k, _| !gone(k));
            memo.text.retain(|(k, _), _| !gone(k));
        }
    });
}

/// Whether a scope is active on this thread (for tests).
pub fn active() -> bool {
    MEMO.with(|m| m.borrow().is_some())
}

fn remembered<K, T>(
    table: fn(&mut Memo) -> &mut HashMap<K, Result<T, i32>>,
    key: K,
    ask: impl FnOnce() -> io::Result<T>,
) -> io::Result<T>
where
    K: Eq + Hash,
    T: Clone,
{
    let hit = MEMO.with(|m| m.borrow_mut().as_mut().map(|memo| table(memo).get(&key).cloned()));
    match hit {
        // No scope: ask, remember nothing.
        None => ask(),
        Some(Some(answer)) => answer.map_err(io::Error::from_raw_os_error),
        Some(None) => {
            let answer = ask();
            let kept = match &answer {
                Ok(v) => Some(Ok(v.clone())),
                Err(e) => e.raw_os_error().map(Err),
            };
            if let Some(kept) = kept {
                MEMO.with(|m| {
                    if let Some(memo) = m.borrow_mut().as_mut() {
                        table(memo).insert(key, kept);
                    }
                });
            }
            answer
        }
    }
}

/// [`fs::symlink_metadata`] (`lstat`), remembered in a scope.
pub fn symlink_metadata(p: &Path) -> io::Result<fs::Metadata> {
    remembered(|m| &mut m.lstat, key(p), || fs::symlink_metadata(p))
}

/// [`fs::metadata`] (`stat`), remembered in a scope.
pub fn metadata(p: &Path) -> io::Result<fs::Metadata> {
    remembered(|m| &mut m.stat, key(p), || fs::metadata(p))
}

/// [`fs::read_link`], remembered in a scope.
pub fn read_link(p: &Path) -> io::Result<PathBuf> {
    remembered(|m| &mut m.link, key(p), || fs::read_link(p))
}

/// [`fs::canonicalize`] (`realpath`), remembered in a scope. There an
/// absolute path is resolved as `realpath` does it, a component at a time
/// (a link replaced by its target, `..` applied to where the walk is), but
/// from the remembered `lstat`s and `readlink`s, so that paths sharing a
/// prefix (`ws`, `ws/.git`, `ws/.git/config`) walk it once. A missing
/// component ends it with `ENOENT`, where `realpath` stops too (glibc's and
/// musl's alike: `ws/.git/config` in a workspace without `.git` costs no
/// second walk). Whatever else that walk cannot finish (a component that is
/// not a directory, a loop, an unreadable link), and anything but a plain
/// absolute path, is left to `realpath` itself, so the answer and its
/// error are the same.
pub fn canonicalize(p: &Path) -> io::Result<PathBuf> {
    remembered(
        |m| &mut m.real,
        key(p),
        || {
            if active() {
                if let Some(real) = walk(p) {
                    return real;
                }
            }
            fs::canonicalize(p)
        },
    )
}

/// Links the remembered walk follows before it leaves the path to
/// `realpath`.
const MOST_LINKS: usize = 32;
/// Path lengths the remembered walk leaves to `realpath` (PATH_MAX, less
/// a margin), which may fail with `ENAMETOOLONG` on them.
const FAR: usize = 4000;

/// The walk [`canonicalize`] does in a scope; `None` for "ask `realpath`".
fn walk(p: &Path) -> Option<io::Result<PathBuf>> {
    use super::walk::push_front;
    use std::os::unix::ffi::OsStrExt;
    let raw = p.as_os_str().as_bytes();
    // A trailing `/` or `/.` asks for a directory, which the components no
    // longer say; a leading `//` is kept by musl's realpath; a path near
    // PATH_MAX fails there with ENAMETOOLONG; /proc's links are left to the
    // kernel's own walk.
    if !p.is_absolute()
        || (raw.len() > 1 && (raw.ends_with(b"/") || raw.ends_with(b"/.")))
        || raw.starts_with(b"//")
        || raw.len() >= FAR
        || p.starts_with("/proc")
    {
        return None;
    }
    let mut pending: std::collections::VecDeque<OsString> = std::collections::VecDeque::new();
    push_front(&mut pending, p);
    let mut cur = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        if next.starts_with("/proc") {
            return None;
        }
        let m = match symlink_metadata(&next) {
            Ok(m) => m,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Some(Err(e)),
            Err(_) => return None,
        };
        if m.file_type().is_symlink() {
            links += 1;
            // Below the links glibc (40) and musl (39) follow.
            if links > MOST_LINKS {
                return None;
            }
            let target = read_link(&next).ok()?;
            // A target ending in `/` asks for a directory too; one with a
            // leading `//` is kept as such by musl.
            let t = target.as_os_str().as_bytes();
            if t.ends_with(b"/") || t.ends_with(b"/.") || t == b"." || t.starts_with(b"//") {
                return None;
            }
            let left: usize = pending.iter().map(|c| c.len() + 1).sum();
            if t.len() + left + cur.as_os_str().len() >= FAR {
                return None;
            }
            if target.is_absolute() {
                cur = PathBuf::from("/");
            }
            push_front(&mut pending, &target);
            continue;
        }
        if !pending.is_empty() && !m.is_dir() {
            return None;
        }
        cur = next;
    }
    Some(Ok(cur))
}

/// Whether `p` names a directory, following links ([`Path::is_dir`]).
pub fn is_dir(p: &Path) -> bool {
    metadata(p).is_ok_and(|m| m.is_dir())
}

/// Whether `p` names a regular file, following links ([`Path::is_file`]).
pub fn is_file(p: &Path) -> bool {
    metadata(p).is_ok_and(|m| m.is_file())
}

/// Whether `p` exists, following links ([`Path::exists`]).
pub fn exists(p: &Path) -> bool {
    metadata(p).is_ok()
}

/// The text `read` gives for `(p, follow)`, read once in a scope: for
/// small files read whole (git's config files), whose reader says `None`
/// for "absent or unreadable".
pub fn text(p: &Path, follow: bool, read: impl FnOnce() -> Option<String>) -> Option<String> {
    // The reader cannot fail (`None` is an answer), so neither can this.
    remembered(|m| &mut m.text, (key(p), follow), || Ok(read())).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn a_scope_answers_from_its_first_lookup_and_forgets_at_its_end() {
        let d = ok(tempfile::tempdir());
        let f = d.path().join("f");
        {
            let _s = scope();
            assert!(active());
            assert_eq!(symlink_metadata(&f).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::ENOENT)));
            assert!(!exists(&f));
            ok(fs::write(&f, b"x"));
            // Remembered: still missing inside the scope, errno and all.
            assert_eq!(symlink_metadata(&f).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::ENOENT)));
            assert!(!exists(&f));
            {
                let _inner = scope();
                assert!(!exists(&f), "a nested scope shares the outer one's answers");
            }
            assert!(active(), "a nested scope leaves the outer one in place");
        }
        assert!(!active());
        // Outside a scope: the filesystem is asked every time.
        assert!(ok(symlink_metadata(&f)).is_file());
        ok(fs::remove_file(&f));
        assert!(symlink_metadata(&f).is_err());
    }

    /// `x/` and `x` are different questions to the kernel (a trailing `/`
    /// follows a link and fails on a file): one must not answer the other.
    #[test]
    fn a_trailing_slash_is_its_own_question() {
        use std::os::unix::fs::symlink;
        let d = ok(tempfile::tempdir());
        let b = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir(b.join("real")));
        ok(fs::write(b.join("file"), b"x"));
        ok(symlink("real", b.join("link")));
        let slash = |p: &Path| PathBuf::from(format!("{}/", p.display()));
        let _scope = scope();
        assert!(ok(symlink_metadata(&slash(&b.join("link")))).is_dir());
        assert!(ok(symlink_metadata(&b.join("link"))).file_type().is_symlink());
        assert_eq!(ok(canonicalize(&b.join("link"))), b.join("real"));
        assert_eq!(metadata(&slash(&b.join("file"))).map_err(|e| e.raw_os_error()).err(), Some(Some(libc::ENOTDIR)));
        assert!(is_file(&b.join("file")));
        assert!(canonicalize(&b.join("file")).is_ok());
        assert_eq!(
            canonicalize(&slash(&b.join("file"))).map_err(|e| e.raw_os_error()).err(),
            Some(Some(libc::ENOTDIR))
        );
    }

    /// What the plan itself creates is asked again after `forget`.
    #[test]
    fn forget_drops_a_path_and_what_lies_below_it() {
        let d = ok(tempfile::tempdir());
        let dir = d.path().join("made");
        let _scope = scope();
        assert!(!is_dir(&dir));
        assert!(!exists(&dir.join("x")));
        ok(fs::create_dir(&dir));
        ok(fs::write(dir.join("x"), b""));
        assert!(!is_dir(&dir), "remembered");
        forget(&dir);
        assert!(is_dir(&dir));
        assert!(exists(&dir.join("x")));
    }

    #[test]
    fn texts_and_real_paths_are_read_once_per_scope() {
        let d = ok(tempfile::tempdir());
        let f = d.path().join("config");
        ok(fs::write(&f, b"one"));
        let read = || fs::read_to_string(&f).ok();
        let _s = scope();
        assert_eq!(text(&f, true, read).as_deref(), Some("one"));
        ok(fs::write(&f, b"two"));
        assert_eq!(text(&f, true, read).as_deref(), Some("one"));
        assert_eq!(text(&f, false, read).as_deref(), Some("two"), "the key holds how it is read");
        let real = ok(canonicalize(d.path()));
        assert_eq!(ok(canonicalize(d.path())), real);
    }

    /// The walk from remembered lookups gives what `realpath` gives, on
    /// every shape of path, errors included.
    #[test]
    fn the_remembered_walk_agrees_with_realpath() {
        use std::os::unix::fs::symlink;
        let d = ok(tempfile::tempdir());
        let b = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir_all(b.join("a/b/c")));
        ok(fs::write(b.join("a/file"), b"x"));
        ok(symlink("a/b", b.join("rel")));
        ok(symlink(b.join("a/b/c"), b.join("abs")));
        ok(symlink("../..", b.join("a/b/c/up")));
        ok(symlink("rel/../file", b.join("dotdot")));
        ok(symlink("loop2", b.join("loop1")));
        ok(symlink("loop1", b.join("loop2")));
        ok(symlink("missing", b.join("dangling")));
        ok(symlink("a", b.join("chain1")));
        ok(symlink("chain1/b", b.join("chain2")));
        ok(symlink("a/file/", b.join("slashfile")));
        ok(symlink("a/b/", b.join("slashdir")));
        ok(symlink(".", b.join("dot")));
        ok(symlink("//tmp", b.join("slashslash")));
        ok(symlink("/nonexistent-zz/q", b.join("toabsmissing")));
        ok(symlink("noexec/b", b.join("tonoexec")));
        ok(fs::create_dir_all(b.join("noexec/b")));
        {
            // Not searchable (for a caller without CAP_DAC_READ_SEARCH).
            use std::os::unix::fs::PermissionsExt;
            ok(fs::set_permissions(b.join("noexec"), fs::Permissions::from_mode(0o600)));
        }
        // Chains of 33 and of 40 links (glibc follows 40, musl 39).
        for n in 1..=40 {
            let to = if n == 1 { "a".to_string() } else { format!("l{}", n - 1) };
            ok(symlink(to, b.join(format!("l{n}"))));
        }
        // A long spelling of a short path (ENAMETOOLONG for musl).
        let long = "a/b/../".repeat(700) + "a";
        let shapes = [
            "a",
            "a/b/c",
            "rel",
            "rel/c",
            "abs",
            "abs/up",
            "abs/up/file",
            "a/b/c/up/b",
            "dotdot",
            "a/../a/b",
            "a/b/../../a",
            "rel/..",
            "loop1",
            "dangling",
            "dangling/x",
            "missing",
            "missing/x",
            "a/missing/x",
            "a/missing/../b",
            "rel/missing/c",
            "abs/up/missing",
            "a/missing/..",
            "missing/..",
            "dangling/..",
            "a/b/c/up/missing",
            "noexec/missing",
            "noexec/b/../missing",
            "a/missing/../../a",
            "abs/up/missing/x/..",
            "toabsmissing",
            "toabsmissing/x",
            "tonoexec/missing",
            "missing/./x",
            "a/missing/.",
            "a/file",
            "a/file/x",
            "a/file/",
            "a/b/",
            "a/b/.",
            "a/./b",
            "chain2/c",
            "a//b",
            "slashfile",
            "slashdir",
            "slashdir/c",
            "dot",
            "dot/a",
            "slashslash",
            "l33",
            "l40",
            "l40/b",
            &long,
        ];
        // Compared as bytes: `Path`'s equality would hide a `//tmp`.
        let both = |p: &Path| {
            let want = fs::canonicalize(p).map(PathBuf::into_os_string).map_err(|e| e.raw_os_error());
            let _scope = scope();
            // Twice: the walk, then the remembered answer.
            for _ in 0..2 {
                let got = canonicalize(p).map(PathBuf::into_os_string).map_err(|e| e.raw_os_error());
                assert_eq!(got, want, "{}", p.display());
            }
        };
        for s in shapes {
            both(&b.join(s));
        }
        both(Path::new("//tmp"));
        both(Path::new("//"));
        {
            // Searchable again, so that the directory can be removed.
            use std::os::unix::fs::PermissionsExt;
            ok(fs::set_permissions(b.join("noexec"), fs::Permissions::from_mode(0o700)));
        }
        let _scope = scope();
        assert_eq!(ok(canonicalize(Path::new("/"))), PathBuf::from("/"));
        assert_eq!(ok(canonicalize(Path::new("/proc/self"))), ok(fs::canonicalize("/proc/self")));
    }
}
