/*
 * sandbox-floor: the least a sandbox with portcullis's layers costs the
 * kernel per command, for scripts/bench-spawn's throughput test.
 *
 * For each command it does, in C and with nothing else: clone3() with new
 * user, mount, pid, ipc and uts namespaces; the uid/gid maps; a cgroup
 * leaf (mkdir, pid 1 born in it with CLONE_INTO_CGROUP, rmdir once it has
 * exited), when FLOOR_CGROUP names a writable cgroup2 directory; in the child, a
 * tmpfs root with read-only binds of /usr and /etc, the /lib, /bin and
 * /lib64 links, six /dev nodes bound from the host, devpts, a /dev/shm
 * tmpfs, a /tmp tmpfs, /proc with four read-only binds and eight masks,
 * pivot_root and the old root's detach; then pid 1 forks the command,
 * which installs a Landlock ruleset (reads everywhere, writes in /tmp) and
 * a seccomp filter of 45 refused syscalls, and execs. Pid 1 reaps and
 * exits. There is no per-command helper process to start, no policy, no
 * plan, no audit, no observer, no pool: what is left of a portcullis run's
 * CPU above this floor is what its design adds.
 *
 *   sandbox-floor N K PROGRAM [ARGS...]
 *
 * runs PROGRAM N times with K in flight from this one process and prints
 * "N commands in S s" on stdout; it exits non-zero at the first command
 * that fails (its stderr says which step).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { if ((x) < 0) { fprintf(stderr, "sandbox-floor: %s: %s\n", #x, strerror(errno)); _exit(120); } } while (0)

static char **command;
static const char *cgroup_parent;

static void put(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    CK(fd);
    CK(write(fd, text, strlen(text)));
    close(fd);
}

static void bind_ro(const char *src, const char *dst, int ro) {
    CK(mount(src, dst, NULL, MS_BIND | MS_REC, NULL));
    if (ro) CK(mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL));
}

static void lock_down(void) {
    struct landlock_ruleset_attr ra = { .handled_access_fs = (1ULL << 16) - 1 };
    int rs = syscall(SYS_landlock_create_ruleset, &ra, sizeof ra, 0);
    CK(rs);
    struct landlock_path_beneath_attr pb = {
        .allowed_access = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR,
        .parent_fd = open("/", O_PATH | O_CLOEXEC),
    };
    CK(syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0));
    close(pb.parent_fd);
    pb.allowed_access = (1ULL << 16) - 1;
    pb.parent_fd = open("/tmp", O_PATH | O_CLOEXEC);
    CK(syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0));
    close(pb.parent_fd);
    CK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    CK(syscall(SYS_landlock_restrict_self, rs, 0));
    close(rs);
    static const int refused[] = {
        SYS_mount, SYS_umount2, SYS_pivot_root, SYS_unshare, SYS_setns, SYS_ptrace, SYS_bpf, SYS_perf_event_open,
        SYS_kexec_load, SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_open_tree, SYS_move_mount,
        SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick, SYS_mount_setattr, SYS_keyctl, SYS_add_key,
        SYS_request_key, SYS_userfaultfd, SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
        SYS_swapon, SYS_swapoff, SYS_reboot, SYS_acct, SYS_quotactl, SYS_syslog, SYS_settimeofday,
        SYS_clock_settime, SYS_adjtimex, SYS_personality, SYS_chroot, SYS_vhangup, SYS_lookup_dcookie,
        SYS_name_to_handle_at, SYS_open_by_handle_at, SYS_process_vm_readv, SYS_process_vm_writev, SYS_kcmp,
        SYS_clone3,
    };
    enum { N = sizeof refused / sizeof refused[0] };
    struct sock_filter f[5 + 2 * N];
    int k = 0;
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (int i = 0; i < (int)N; i++) {
        f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused[i], 0, 1);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    }
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = { .len = (unsigned short)k, .filter = f };
    CK(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
}

static int pid1(void *arg) {
    int go = *(int *)arg;
    char c;
    if (read(go, &c, 1) != 1) _exit(121); /* the maps are written */
    CK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
    CK(mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"));
    CK(chdir("/tmp"));
    const char *dirs[] = { "usr", "etc", "proc", "dev", "dev/pts", "dev/shm", "tmp", "old" };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) CK(mkdir(dirs[i], 0755));
    CK(symlink("usr/bin", "bin"));
    CK(symlink("usr/lib", "lib"));
    CK(symlink("usr/lib64", "lib64"));
    bind_ro("/usr", "usr", 1);
    bind_ro("/etc", "etc", 1);
    const char *devs[] = { "null", "zero", "full", "random", "urandom", "tty" };
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        char src[32], dst[32];
        snprintf(src, sizeof src, "/dev/%s", devs[i]);
        snprintf(dst, sizeof dst, "dev/%s", devs[i]);
        int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
        CK(fd);
        close(fd);
        bind_ro(src, dst, 0);
    }
    CK(mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620"));
    CK(mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m"));
    CK(mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1g"));
    CK(mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
    const char *ro[] = { "proc/sys", "proc/irq", "proc/bus", "proc/fs" };
    for (size_t i = 0; i < sizeof ro / sizeof ro[0]; i++) bind_ro(ro[i], ro[i], 1);
    const char *masked[] = { "proc/keys", "proc/key-users", "proc/timer_list", "proc/kallsyms", "proc/kpagecount",
                             "proc/kpageflags", "proc/kpagecgroup", "proc/config.gz" };
    int fd = open("mask", O_CREAT | O_WRONLY | O_CLOEXEC, 0);
    CK(fd);
    close(fd);
    for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++) mount("mask", masked[i], NULL, MS_BIND, NULL);
    CK(syscall(SYS_pivot_root, ".", "old"));
    CK(umount2("/old", MNT_DETACH));
    CK(rmdir("/old"));
    CK(chdir("/"));
    CK(mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL));
    pid_t cmd = fork();
    CK(cmd);
    if (cmd == 0) {
        lock_down();
        execv(command[0], command);
        _exit(127);
    }
    int status = 0, code = 126;
    pid_t p;
    while ((p = waitpid(-1, &status, 0)) > 0)
        if (p == cmd) code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return code;
}

struct clone_args_v2 {
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};

/* In-flight commands: pid 1's pid and its cgroup leaf's number. */
static struct { pid_t pid; int leaf; } flight[64];
static int leaves;

/* Start one command (pid 1 born in a fresh cgroup leaf with
 * CLONE_INTO_CGROUP, as portcullis's helper makes it); returns its pid. */
static pid_t start(void) {
    int go[2];
    CK(pipe2(go, O_CLOEXEC));
    struct clone_args_v2 args = { 0 };
    args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    args.exit_signal = SIGCHLD;
    int leaf = -1, cg = -1;
    if (cgroup_parent) {
        char path[512];
        leaf = leaves++;
        snprintf(path, sizeof path, "%s/floor-%d-%d", cgroup_parent, getpid(), leaf);
        CK(mkdir(path, 0755));
        cg = open(path, O_DIRECTORY | O_CLOEXEC);
        CK(cg);
        args.flags |= 0x200000000ULL; /* CLONE_INTO_CGROUP */
        args.cgroup = (unsigned long long)cg;
    }
    /* No stack: fork semantics, in this single-threaded process. */
    long pid = syscall(SYS_clone3, &args, sizeof args);
    CK(pid);
    if (pid == 0) _exit(pid1(&go[0]));
    if (cg >= 0) close(cg);
    close(go[0]);
    char path[64], text[64];
    snprintf(path, sizeof path, "/proc/%ld/uid_map", pid);
    snprintf(text, sizeof text, "0 %d 1\n", getuid());
    put(path, text);
    snprintf(path, sizeof path, "/proc/%ld/setgroups", pid);
    put(path, "deny");
    snprintf(path, sizeof path, "/proc/%ld/gid_map", pid);
    snprintf(text, sizeof text, "0 %d 1\n", getgid());
    put(path, text);
    CK(write(go[1], "x", 1));
    close(go[1]);
    for (int i = 0; i < 64; i++)
        if (flight[i].pid == 0) {
            flight[i].pid = (pid_t)pid;
            flight[i].leaf = leaf;
            break;
        }
    return (pid_t)pid;
}

/* The cgroup leaf of pid 1 `pid`, which has exited, removed. */
static void finish(pid_t pid) {
    for (int i = 0; i < 64; i++)
        if (flight[i].pid == pid) {
            if (flight[i].leaf >= 0) {
                char path[512];
                snprintf(path, sizeof path, "%s/floor-%d-%d", cgroup_parent, getpid(), flight[i].leaf);
                CK(rmdir(path));
            }
            flight[i].pid = 0;
            return;
        }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: sandbox-floor N K PROGRAM [ARGS...]\n");
        return 2;
    }
    int n = atoi(argv[1]), k = atoi(argv[2]);
    if (k < 1 || k > 64) k = 4;
    command = argv + 3;
    cgroup_parent = getenv("FLOOR_CGROUP");
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int started = 0, running = 0;
    while (started < n || running > 0) {
        while (started < n && running < k) {
            start();
            started++;
            running++;
        }
        int status;
        pid_t done = wait(&status);
        CK(done);
        running--;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "sandbox-floor: pid 1 %d ended with status %d\n", done, status);
            return 1;
        }
        finish(done);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%d commands in %.6f s\n", n, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
