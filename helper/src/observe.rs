//! The refused-write observer's seccomp table, and its own program.
//!
//! The observer watches the syscalls that write by path (and the `open`s
//! whose flags ask for writing: read-only opens never stop): for them its
//! only action besides `ALLOW` is `SECCOMP_RET_USER_NOTIF`. The listener
//! goes to the library, which reads the path, decides whether the kernel is
//! about to refuse the write and always answers
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel then runs the syscall as if
//! the observer were not there, and stays the only enforcer.
//!
//! The command installs the watches folded into the main filter's program
//! ([`compile_with`]), one filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
//! A call the main table refuses is never notified, as the kernel would
//! have it with two filters (`ERRNO` beats `USER_NOTIF`): `openat2`
//! (answered `ENOSYS` there, so callers fall back to `openat`, which is
//! watched), the setid `open`s and `chmod`s, and in the landlock-only mode
//! every metadata call. [`compile`] is the observer's program alone: what a
//! debug helper told to skip the main filter installs, and the reference
//! the unit tests compare the folded program with.
//!
//! The table ([`watched`]) is shared with the library, which decodes each
//! notification's arguments with it.

use seccompiler::BpfProgram;

pub use crate::filter::Watch;
use crate::filter::{
    Asm, FilterError, Goto, Profile, BPF_JEQ_K, BPF_JSET_K, BPF_LD_W_ABS, BPF_RET_K, OFF_ARGS, RET_ALLOW,
};

/// `SECCOMP_RET_USER_NOTIF` (`<linux/seccomp.h>`).
pub const RET_USER_NOTIF: u32 = 0x7fc0_0000;

/// The open flags that make an `open` a write: `O_WRONLY | O_RDWR | O_CREAT
/// | O_TRUNC` (`O_TMPFILE` needs `O_WRONLY` or `O_RDWR`, so it is covered).
pub const WRITE_OPEN_FLAGS: u32 = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// The tag of the hand-over message that carries the listener (`SCM_RIGHTS`).
pub const TAG_LISTENER: u8 = b'l';
/// The tag of the hand-over message that says the observer could not be
/// installed; four little-endian bytes of errno follow.
pub const TAG_FAILED: u8 = b'e';

/// How an argument names a file: a directory fd argument (`None`: the
/// working directory, as for `AT_FDCWD`) and a path argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    /// Index of the directory fd argument, if the call has one.
    pub dirfd: Option<u8>,
    /// Index of the path argument.
    pub path: u8,
}

const fn at(dirfd: u8, path: u8) -> At {
    At { dirfd: Some(dirfd), path }
}

const fn cwd(path: u8) -> At {
    At { dirfd: None, path }
}

/// What a watched syscall writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `open`, `openat`, `creat`: flags in argument `flags` (`None`: creat,
    /// whose flags are `O_CREAT | O_WRONLY | O_TRUNC`).
    Open { file: At, flags: Option<u8> },
    /// A new directory entry at `file` (mkdir, mknod, symlink).
    Create { file: At },
    /// A hard link: `old` must exist, the new entry is `new`.
    Link { old: At, new: At },
    /// Removing the entry at `file` (unlink, rmdir).
    Remove { file: At },
    /// Moving `old` to `new`.
    Rename { old: At, new: At },
    /// Changing the metadata of `file` (mode, owner, times, extended
    /// attributes); `follow`: whether a final symbolic link is followed by
    /// default; `flags`: the argument holding `AT_SYMLINK_NOFOLLOW` and
    /// `AT_EMPTY_PATH`, if any; `nullable`: whether a null path names the
    /// directory fd's own file (`utimensat(fd, NULL, ...)`, which is
    /// `futimens`, and `futimesat`). That form changes a file through a
    /// descriptor and is not watched, as `fchmod` and `fchown` are not (see
    /// [`Watched::watch`]).
    Meta { file: At, follow: bool, flags: Option<u8>, nullable: bool },
    /// `truncate(path)`.
    Truncate { file: At },
}

/// One watched syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    /// Its name.
    pub name: &'static str,
    /// Its number for the build architecture.
    pub nr: i64,
    /// What it writes.
    pub op: Op,
}

impl Watched {
    /// Which of its calls stop: an open only when its flags ask for
    /// writing; a metadata call with a nullable path only when it names a
    /// path (`futimens`, `utimensat(fd, NULL, ...)`, goes on, as `fchmod`
    /// and `fchown`, which are not in the table, do). Calls through a
    /// descriptor are not watched: the descriptor's own `open` was (every
    /// descriptor a command can write through was opened by a watched
    /// `open`), and extracting an archive or copying with `cp -p` follows
    /// each created file's `open` with `futimens`, `fchown` and `fchmod`,
    /// three stops more per file for what its `open` already showed
    /// writable (docs: "The refused-write report").
    pub fn watch(&self) -> Watch {
        match self.op {
            Op::Open { flags: Some(arg), .. } => Watch::AnyBit { arg, mask: WRITE_OPEN_FLAGS },
            Op::Meta { file, nullable: true, .. } => Watch::NonNull { arg: file.path },
            _ => Watch::Always,
        }
    }
}

const fn w(name: &'static str, nr: i64, op: Op) -> Watched {
    Watched { name, nr, op }
}

/// Every watched syscall. Numbers not yet in libc are from
/// `<asm-generic/unistd.h>` (the same on x86_64 and aarch64).
pub fn watched() -> Vec<Watched> {
    let meta = |file, follow, flags| Op::Meta { file, follow, flags, nullable: false };
    let meta_or_fd = |file, flags| Op::Meta { file, follow: true, flags, nullable: true };
    let mut v = vec![
        w("openat", libc::SYS_openat, Op::Open { file: at(0, 1), flags: Some(2) }),
        w("mkdirat", libc::SYS_mkdirat, Op::Create { file: at(0, 1) }),
        w("mknodat", libc::SYS_mknodat, Op::Create { file: at(0, 1) }),
        w("symlinkat", libc::SYS_symlinkat, Op::Create { file: at(1, 2) }),
        w("linkat", libc::SYS_linkat, Op::Link { old: at(0, 1), new: at(2, 3) }),
        w("unlinkat", libc::SYS_unlinkat, Op::Remove { file: at(0, 1) }),
        w("renameat", libc::SYS_renameat, Op::Rename { old: at(0, 1), new: at(2, 3) }),
        w("renameat2", libc::SYS_renameat2, Op::Rename { old: at(0, 1), new: at(2, 3) }),
        w("fchmodat", libc::SYS_fchmodat, meta(at(0, 1), true, None)),
        w("fchmodat2", 452, meta(at(0, 1), true, Some(3))),
        w("fchownat", libc::SYS_fchownat, meta(at(0, 1), true, Some(4))),
        w("utimensat", libc::SYS_utimensat, meta_or_fd(at(0, 1), Some(3))),
        w("setxattr", libc::SYS_setxattr, meta(cwd(0), true, None)),
        w("lsetxattr", libc::SYS_lsetxattr, meta(cwd(0), false, None)),
        w("removexattr", libc::SYS_removexattr, meta(cwd(0), true, None)),
        w("lremovexattr", libc::SYS_lremovexattr, meta(cwd(0), false, None)),
        w("setxattrat", 463, meta(at(0, 1), true, Some(2))),
        w("removexattrat", 466, meta(at(0, 1), true, Some(2))),
        w("truncate", libc::SYS_truncate, Op::Truncate { file: cwd(0) }),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        w("open", libc::SYS_open, Op::Open { file: cwd(0), flags: Some(1) }),
        w("creat", libc::SYS_creat, Op::Open { file: cwd(0), flags: None }),
        w("mkdir", libc::SYS_mkdir, Op::Create { file: cwd(0) }),
        w("mknod", libc::SYS_mknod, Op::Create { file: cwd(0) }),
        w("symlink", libc::SYS_symlink, Op::Create { file: cwd(1) }),
        w("link", libc::SYS_link, Op::Link { old: cwd(0), new: cwd(1) }),
        w("unlink", libc::SYS_unlink, Op::Remove { file: cwd(0) }),
        w("rmdir", libc::SYS_rmdir, Op::Remove { file: cwd(0) }),
        w("rename", libc::SYS_rename, Op::Rename { old: cwd(0), new: cwd(1) }),
        w("chmod", libc::SYS_chmod, meta(cwd(0), true, None)),
        w("chown", libc::SYS_chown, meta(cwd(0), true, None)),
        w("lchown", libc::SYS_lchown, meta(cwd(0), false, None)),
        w("utime", libc::SYS_utime, meta(cwd(0), true, None)),
        w("utimes", libc::SYS_utimes, meta(cwd(0), true, None)),
        w("futimesat", libc::SYS_futimesat, meta_or_fd(at(0, 1), None)),
    ]);
    v
}

/// The watched syscall with number `nr`.
pub fn lookup(nr: i32) -> Option<Watched> {
    watched().into_iter().find(|x| x.nr == i64::from(nr))
}

/// Compile the observer's program: `ALLOW` for a foreign architecture and
/// for x32 numbers (the main filter kills or refuses those), `USER_NOTIF`
/// for the opens that carry a write flag and for every other watched call
/// as its [`Watched::watch`] says, `ALLOW` for the rest.
pub fn compile() -> Result<BpfProgram, FilterError> {
    let table = watched();
    let mut a = Asm::default();
    a.prologue(RET_ALLOW, RET_ALLOW);
    // The opens first (`openat` runs the program on every open, read-only
    // or not: the flags decide); every other watched call in one search
    // (`Asm::dispatch`), which is what the kernel walks for every syscall
    // number when it loads the filter.
    let opens: Vec<(u8, _)> = table
        .iter()
        .filter_map(|x| match x.op {
            Op::Open { flags: Some(f), .. } => Some((x.nr, f)),
            _ => None,
        })
        .map(|(nr, f)| (f, (nr, a.label())))
        .collect();
    let search = a.label();
    for (_, (nr, l)) in &opens {
        a.jump_if(BPF_JEQ_K, *nr as u32, *l);
    }
    a.jump(search);
    for (flags, (_, l)) in &opens {
        let notify = a.label();
        a.bind(*l);
        a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(*flags));
        a.jump_if(BPF_JSET_K, WRITE_OPEN_FLAGS, notify);
        a.stmt(BPF_RET_K, RET_ALLOW);
        a.bind(notify);
        a.stmt(BPF_RET_K, RET_USER_NOTIF);
    }
    a.bind(search);
    let others: Vec<&Watched> = table.iter().filter(|x| !matches!(x.op, Op::Open { flags: Some(_), .. })).collect();
    let rest: Vec<(u32, Goto)> = others
        .iter()
        .enumerate()
        .map(|(i, x)| match x.watch() {
            Watch::Always => (x.nr as u32, Goto::Ret(RET_USER_NOTIF)),
            _ => (x.nr as u32, Goto::Block(i)),
        })
        .collect();
    a.dispatch(&rest, RET_ALLOW, &mut |a, i| crate::filter::emit_allow(a, others.get(i).map(|x| x.watch())))?;
    a.finish()
}

/// The main filter for `profile` with the observer's watches folded in:
/// one program, installed with one `seccomp(2)` call and its listener
/// (`SECCOMP_FILTER_FLAG_NEW_LISTENER`). It answers every call exactly as
/// the two installed as separate filters would (the kernel takes the
/// strictest action: the main filter's kills and errnos beat
/// `USER_NOTIF`, which beats `ALLOW`; a unit test compares them for every
/// syscall number), but the kernel checks, translates, JIT-compiles and
/// caches one program on the command's critical path, over one search, and
/// a call it cannot cache (`openat`) runs one program, not two
/// (`filter::compile_watched`).
pub fn compile_with(profile: Profile) -> Result<BpfProgram, FilterError> {
    let watch: Vec<(u32, Watch)> = watched().iter().map(|x| (x.nr as u32, x.watch())).collect();
    crate::filter::compile_watched(profile, &watch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::tests::run;
    use crate::filter::{AUDIT_ARCH, X32_SYSCALL_BIT};

    fn prog() -> BpfProgram {
        compile().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_watched_call_notifies_and_read_only_opens_do_not() {
        let p = prog();
        for x in watched() {
            let nr = x.nr as u32;
            match x.op {
                Op::Open { flags: Some(f), .. } => {
                    let mut args = [0u64; 6];
                    for flags in [libc::O_RDONLY, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY, libc::O_PATH] {
                        args[usize::from(f)] = flags as u64;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_ALLOW, "{} {flags:#o}", x.name);
                    }
                    for flags in [
                        libc::O_WRONLY,
                        libc::O_RDWR,
                        libc::O_CREAT,
                        libc::O_TRUNC,
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                        libc::O_TMPFILE | libc::O_RDWR,
                    ] {
                        args[usize::from(f)] = flags as u64;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_USER_NOTIF, "{} {flags:#o}", x.name);
                        // High bits are ignored by the kernel; so are they here.
                        args[usize::from(f)] = flags as u64 | 1 << 40;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_USER_NOTIF, "{} high bits", x.name);
                    }
                }
                _ => match x.watch() {
                    Watch::NonNull { arg } => {
                        // futimens(fd): through a descriptor, not watched;
                        // a path in either half of the pointer is.
                        assert_eq!(run(&p, AUDIT_ARCH, nr, [0; 6]), RET_ALLOW, "{} null", x.name);
                        for v in [0x7fff_1234_5678u64, 1, 1 << 40] {
                            let mut args = [0u64; 6];
                            args[usize::from(arg)] = v;
                            assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_USER_NOTIF, "{} {v:#x}", x.name);
                        }
                    }
                    _ => assert_eq!(run(&p, AUDIT_ARCH, nr, [0; 6]), RET_USER_NOTIF, "{}", x.name),
                },
            }
        }
        // Changes through a descriptor are not watched: its open was.
        for nr in [libc::SYS_fchmod, libc::SYS_fchown, libc::SYS_ftruncate, libc::SYS_fsetxattr] {
            assert_eq!(run(&p, AUDIT_ARCH, nr as u32, [3, 0o644, 0, 0, 0, 0]), RET_ALLOW, "syscall {nr}");
        }
        let utimensat = watched().into_iter().find(|x| x.name == "utimensat").map(|x| x.watch());
        assert_eq!(utimensat, Some(Watch::NonNull { arg: 1 }));
    }

    #[test]
    fn other_calls_foreign_arches_and_x32_pass() {
        let p = prog();
        for nr in [libc::SYS_read, libc::SYS_write, libc::SYS_execve, libc::SYS_ftruncate, libc::SYS_close] {
            assert_eq!(run(&p, AUDIT_ARCH, nr as u32, [0; 6]), RET_ALLOW, "syscall {nr}");
        }
        assert_eq!(run(&p, AUDIT_ARCH ^ 1, libc::SYS_unlinkat as u32, [0; 6]), RET_ALLOW);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(run(&p, AUDIT_ARCH, X32_SYSCALL_BIT | libc::SYS_unlinkat as u32, [0; 6]), RET_ALLOW);
        }
        assert!(p.len() < 100, "the observer grew to {} instructions", p.len());
    }

    #[test]
    fn the_kernel_caches_the_hot_syscalls_here_too() {
        // The kernel runs a syscall's filters only when one of them is not
        // known to allow it whatever its arguments: a watched read would
        // undo the main filter's cache for it.
        let p = prog();
        for nr in crate::filter::tests::hot_cacheable() {
            assert!(crate::filter::tests::kernel_caches(&p, nr as u32), "syscall {nr}");
        }
        for x in watched() {
            assert!(!crate::filter::tests::kernel_caches(&p, x.nr as u32), "{}", x.name);
        }
    }

    /// What the kernel returns for a call that two installed filters
    /// answered `a` (the newer) and `b`: the strictest action
    /// (`kernel/seccomp.c`: the lowest `ACTION_ONLY`, as a signed number,
    /// so that the kills come first), the newer on a tie.
    fn strictest(a: u32, b: u32) -> u32 {
        let rank = |r: u32| (r & 0xffff_0000) as i32;
        if rank(a) <= rank(b) {
            a
        } else {
            b
        }
    }

    /// Argument vectors that reach every block of both programs: each
    /// argument in turn set to flags and values the tables compare.
    fn argument_sets() -> Vec<[u64; 6]> {
        let values = argument_values();
        let mut sets = vec![[0u64; 6]];
        for i in 0..6 {
            for v in &values {
                let mut a = [0u64; 6];
                a[i] = *v;
                sets.push(a);
            }
        }
        sets
    }

    /// Flags and values the tables compare arguments with.
    fn argument_values() -> Vec<u64> {
        vec![
            0,
            1,
            2,
            3,
            libc::O_WRONLY as u64,
            libc::O_RDWR as u64,
            libc::O_CREAT as u64,
            libc::O_TRUNC as u64,
            (libc::O_TRUNC | libc::O_RDWR) as u64,
            (libc::O_TRUNC | libc::O_WRONLY) as u64,
            (libc::O_TRUNC | 3) as u64,
            (libc::O_TMPFILE | libc::O_RDWR) as u64,
            libc::O_PATH as u64,
            0o4755,
            0o2755,
            0o755,
            libc::CLONE_NEWUSER as u64,
            libc::CLONE_NEWNS as u64,
            (libc::CLONE_VM | libc::CLONE_THREAD) as u64,
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            crate::filter::AF_VSOCK,
            libc::SOCK_STREAM as u64,
            libc::SOCK_DGRAM as u64,
            crate::filter::TIOCSTI,
            crate::filter::TIOCLINUX,
            u64::from(u32::MAX),
            1 << 40,
        ]
    }

    #[test]
    fn one_program_answers_as_the_two_filters_would() {
        use crate::filter::tests::{kernel_caches, load_walk};
        use crate::filter::{compile_for, AUDIT_ARCH, X32_SYSCALL_BIT};
        let observer = prog();
        let sets = argument_sets();
        for profile in [
            Profile::FULL,
            Profile { degraded: false, network_none: true },
            Profile { degraded: true, network_none: false },
            Profile { degraded: true, network_none: true },
        ] {
            let main = compile_for(profile).unwrap_or_else(|e| panic!("{e}"));
            let both = compile_with(profile).unwrap_or_else(|e| panic!("{e}"));
            let mut nrs: Vec<u32> = (0..520).collect();
            if cfg!(target_arch = "x86_64") {
                nrs.extend([0u32, 2, 257, 83].iter().map(|n| X32_SYSCALL_BIT | n));
            }
            for arch in [AUDIT_ARCH, AUDIT_ARCH ^ 1] {
                for &nr in &nrs {
                    for args in &sets {
                        let (m, o) = (run(&main, arch, nr, *args), run(&observer, arch, nr, *args));
                        assert_eq!(
                            run(&both, arch, nr, *args),
                            strictest(m, o),
                            "{profile:?} arch {arch:#x} nr {nr} args {args:?}"
                        );
                    }
                }
            }
            // Two arguments at once, for every number either program
            // inspects an argument of: the flags with the mode of an open,
            // a socket's domain with its type, `which` with `who`.
            let values = argument_values();
            let inspected: Vec<u32> = (0..520)
                .filter(|nr| {
                    !crate::filter::tests::kernel_caches(&main, *nr)
                        || !crate::filter::tests::kernel_caches(&observer, *nr)
                })
                .collect();
            for (i, j) in [(0usize, 1usize), (1, 2), (2, 3)] {
                for v in &values {
                    for w in &values {
                        let mut args = [0u64; 6];
                        (args[i], args[j]) = (*v, *w);
                        for &nr in &inspected {
                            let (m, o) = (run(&main, AUDIT_ARCH, nr, args), run(&observer, AUDIT_ARCH, nr, args));
                            assert_eq!(
                                run(&both, AUDIT_ARCH, nr, args),
                                strictest(m, o),
                                "{profile:?} nr {nr} {args:?}"
                            );
                        }
                    }
                }
            }
            // The kernel's action cache: exactly what both programs allow
            // whatever the arguments.
            for nr in 0..520 {
                assert_eq!(
                    kernel_caches(&both, nr),
                    kernel_caches(&main, nr) && kernel_caches(&observer, nr),
                    "{profile:?} nr {nr}"
                );
            }
            // What the kernel walks to fill that cache when it loads the
            // program: one search over both tables, about what the main
            // program's alone costs, not the sum of the two programs'.
            let ((bm, bt), (mm, mt), (om, ot)) = (load_walk(&both), load_walk(&main), load_walk(&observer));
            assert!(bm <= mm + 4, "{profile:?}: longest walk {bm}, main alone {mm}");
            assert!(bt * 10 <= mt * 11, "{profile:?}: walk {bt}, main alone {mt}, observer {ot} (longest {om})");
            // Every jump fits (finish() would fail) and the program stays
            // small: a few blocks more than the two programs' sum.
            assert!(both.len() < main.len() + observer.len() + 40, "{profile:?}: {} instructions", both.len());
            eprintln!(
                "{profile:?}: {} instructions, load walk {bt} (longest {bm}); main {mt} ({mm}), observer {ot} ({om})",
                both.len()
            );
        }
    }

    #[test]
    fn numbers_are_unique_and_looked_up() {
        let mut seen = std::collections::HashSet::new();
        for x in watched() {
            assert!(seen.insert(x.nr), "{} listed twice", x.name);
            assert_eq!(lookup(x.nr as i32), Some(x));
        }
        assert_eq!(lookup(libc::SYS_read as i32), None);
    }
}
