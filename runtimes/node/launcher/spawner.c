/*
 * qlr-spawner: the resident supervisor's process starter.
 *
 * Node has no vfork or posix_spawn path on Linux: every child_process.spawn forks the whole
 * supervisor, and on a paravirtualised guest the page-table copy and the copy-on-write faults
 * after it cost ~7 ms of CPU per task. This program is tiny, so its clone(CLONE_VM|CLONE_VFORK)
 * copies nothing. The supervisor starts it once and it is the parent of every task the
 * supervisor starts through it.
 *
 * Usage: qlr-spawner <maxFrameBytes> <maxTasks>, fd 0 = requests, fd 1 = replies.
 *
 * Requests are binary frames: u32 body length (little endian), then the body.
 *   spawn   = u8 1, u32 id, u32 flags (1: has cwd, 2: has uid/gid), u32 uid, u32 gid,
 *             u32 argc, u32 envc, then the NUL-terminated strings: cwd (if any), argv, env.
 *   release = u8 2, u32 id.
 * Replies are text lines:
 *   ready <pid>
 *   started <id> <pid> <startTicks|-> <stdoutFd> <stderrFd>
 *   failed <id> <errnoName> <message>
 *   exited <pid> <code|-1> <signal|0>
 * The stdout/stderr fds name this process's read ends of the task's pipes: the supervisor opens
 * them through /proc/<spawnerPid>/fd/<n>, then sends `release <id>` and they are closed here.
 *
 * Lifetime: PR_SET_PDEATHSIG(SIGKILL) and a parent check at start, so it never outlives the
 * supervisor; it leaves at EOF of fd 0. A malformed request gets a `failed` reply, never a crash.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define FRAME_MIN_BYTES 5
#define SPAWN_FIXED_BYTES (1 + 4 * 6)
#define RELEASE_BYTES (1 + 4)
#define ARGC_MAX 65536
#define ENVC_MAX 65536
#define HELD_MAX 4096
#define REPLY_BUFFER_BYTES (256 * 1024)
#define CHILD_STACK_BYTES (64 * 1024)
#define DEFAULT_PATH "/usr/bin:/bin"

#define OP_SPAWN 1
#define OP_RELEASE 2
#define FLAG_CWD 1u
#define FLAG_IDS 2u

/* Read ends kept open until the supervisor has opened its own copies. */
struct held {
  uint32_t id;
  int stdout_fd;
  int stderr_fd;
};

static struct held held[HELD_MAX];
static size_t held_count;
static unsigned long running_tasks;
static unsigned long max_tasks;
static size_t max_frame_bytes;

static unsigned char *frame;
static size_t frame_filled;

static char reply_buffer[REPLY_BUFFER_BYTES];
static size_t reply_filled;

static int dev_null_fd = -1;
static sigset_t blocked_for_signalfd;

/* What the vfork-like child needs, prepared by the parent (the child may not allocate). */
struct child_plan {
  char **argv;
  char **envp;
  /* Full paths to try in order (PATH lookup done in the parent), NULL-terminated. */
  char **candidates;
  const char *cwd;
  int has_ids;
  uid_t uid;
  gid_t gid;
  int stdout_write;
  int stderr_write;
  int status_write;
};

static char child_stack[CHILD_STACK_BYTES] __attribute__((aligned(16)));

static void die_write_failed(void) { _exit(0); }

static void flush_replies(void) {
  size_t offset = 0;
  while (offset < reply_filled) {
    ssize_t n = write(STDOUT_FILENO, reply_buffer + offset, reply_filled - offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd out = {.fd = STDOUT_FILENO, .events = POLLOUT};
        poll(&out, 1, -1);
        continue;
      }
      die_write_failed(); /* The supervisor is gone. */
    }
    offset += (size_t)n;
  }
  reply_filled = 0;
}

static void reply(const char *format, ...) __attribute__((format(printf, 1, 2)));

static void reply(const char *format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  int length = vsnprintf(line, sizeof line - 1, format, args);
  va_end(args);
  if (length < 0) return;
  if ((size_t)length > sizeof line - 2) length = (int)(sizeof line - 2);
  line[length++] = '\n';
  if (reply_filled + (size_t)length > sizeof reply_buffer) flush_replies();
  memcpy(reply_buffer + reply_filled, line, (size_t)length);
  reply_filled += (size_t)length;
}

static const char *errno_name(int error) {
  switch (error) {
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOTDIR: return "ENOTDIR";
    case ENOEXEC: return "ENOEXEC";
    case E2BIG: return "E2BIG";
    case ENOMEM: return "ENOMEM";
    case EAGAIN: return "EAGAIN";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ELOOP: return "ELOOP";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EISDIR: return "EISDIR";
    case ETXTBSY: return "ETXTBSY";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case EFAULT: return "EFAULT";
    case ELIBBAD: return "ELIBBAD";
    default: return "EUNKNOWN";
  }
}

static uint32_t read_u32(const unsigned char *bytes) {
  return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
         (uint32_t)bytes[3] << 24;
}

static void close_quietly(int fd) {
  if (fd >= 0) close(fd);
}

/*
 * The child: only async-signal-safe system calls, no allocation, no return. It shares the
 * parent's memory until exec (CLONE_VM), so it writes nothing the parent reads but the plan.
 */
static int child_main(void *argument) {
  const struct child_plan *plan = argument;
  int error = 0;
  /* Default dispositions and an empty mask, as libuv gives a Node-spawned child. */
  for (int signal_number = 1; signal_number < 32; signal_number++) {
    if (signal_number == SIGKILL || signal_number == SIGSTOP) continue;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigaction(signal_number, &action, NULL);
  }
  sigset_t empty;
  sigemptyset(&empty);
  if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, 8) != 0) goto failed;
  /* Its own session and process group: a stop signals the group. */
  if (setsid() < 0) goto failed;
  if (dup2(dev_null_fd, STDIN_FILENO) < 0) goto failed;
  if (dup2(plan->stdout_write, STDOUT_FILENO) < 0) goto failed;
  if (dup2(plan->stderr_write, STDERR_FILENO) < 0) goto failed;
  if (plan->cwd != NULL && chdir(plan->cwd) != 0) goto failed;
  if (plan->has_ids) {
    /* libuv's order and its leniency on setgroups; raw calls, the child is not a thread. */
    syscall(SYS_setgroups, 0, NULL);
    if (syscall(SYS_setgid, plan->gid) != 0) goto failed;
    if (syscall(SYS_setuid, plan->uid) != 0) goto failed;
  }
  {
    /* execvp's rules: try each candidate, remember EACCES, stop at anything but "not here". */
    int saw_eacces = 0;
    for (char **candidate = plan->candidates; *candidate != NULL; candidate++) {
      execve(*candidate, plan->argv, plan->envp);
      if (errno == EACCES) saw_eacces = 1;
      else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
               errno != ETIMEDOUT)
        goto failed;
    }
    if (saw_eacces) errno = EACCES;
  }
failed:
  error = errno;
  {
    const unsigned char *bytes = (const unsigned char *)&error;
    size_t offset = 0;
    while (offset < sizeof error) {
      ssize_t n = write(plan->status_write, bytes + offset, sizeof error - offset);
      if (n <= 0) break;
      offset += (size_t)n;
    }
  }
  _exit(127);
}

/* The PATH lookup libuv does: PATH from the task's env, else the default; names with '/' are used as they are. */
static char **path_candidates(const char *file, char **envp) {
  if (strchr(file, '/') != NULL) {
    char **list = calloc(2, sizeof *list);
    if (list == NULL) return NULL;
    list[0] = strdup(file);
    if (list[0] == NULL) {
      free(list);
      return NULL;
    }
    return list;
  }
  const char *path = DEFAULT_PATH;
  for (char **entry = envp; *entry != NULL; entry++)
    if (strncmp(*entry, "PATH=", 5) == 0) {
      path = *entry + 5;
      break;
    }
  size_t parts = 1;
  for (const char *cursor = path; *cursor != '\0'; cursor++)
    if (*cursor == ':') parts++;
  char **list = calloc(parts + 1, sizeof *list);
  if (list == NULL) return NULL;
  size_t count = 0;
  size_t file_length = strlen(file);
  const char *start = path;
  for (;;) {
    const char *end = strchr(start, ':');
    size_t length = end == NULL ? strlen(start) : (size_t)(end - start);
    /* An empty entry means the current directory, as execvp has it. */
    const char *directory = length == 0 ? "." : start;
    size_t directory_length = length == 0 ? 1 : length;
    char *full = malloc(directory_length + 1 + file_length + 1);
    if (full == NULL) break;
    memcpy(full, directory, directory_length);
    full[directory_length] = '/';
    memcpy(full + directory_length + 1, file, file_length + 1);
    list[count++] = full;
    if (end == NULL) break;
    start = end + 1;
  }
  return list;
}

static void free_list(char **list) {
  if (list == NULL) return;
  for (char **entry = list; *entry != NULL; entry++) free(*entry);
  free(list);
}

/* Field 22 of /proc/<pid>/stat, read after the last ')' (the command name may hold anything). */
static int read_start_ticks(pid_t pid, char *out, size_t out_size) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[1024];
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  char *cursor = strrchr(text, ')');
  if (cursor == NULL) return -1;
  cursor++;
  /* After ") " the fields start at field 3; field 22 is the 20th from there. */
  for (int field = 3; field < 22; field++) {
    while (*cursor == ' ') cursor++;
    while (*cursor != ' ' && *cursor != '\0') cursor++;
    if (*cursor == '\0') return -1;
  }
  while (*cursor == ' ') cursor++;
  size_t length = 0;
  while (cursor[length] >= '0' && cursor[length] <= '9') length++;
  if (length == 0 || length >= out_size) return -1;
  memcpy(out, cursor, length);
  out[length] = '\0';
  return 0;
}

static void spawn_failed(uint32_t id, int error, const char *message) {
  reply("failed %u %s %s", id, errno_name(error), message);
}

static void handle_spawn(const unsigned char *body, size_t length) {
  if (length < SPAWN_FIXED_BYTES) {
    reply("failed 0 EINVAL spawn request shorter than its fixed fields");
    return;
  }
  uint32_t id = read_u32(body + 1);
  uint32_t flags = read_u32(body + 5);
  uint32_t uid = read_u32(body + 9);
  uint32_t gid = read_u32(body + 13);
  uint32_t argc = read_u32(body + 17);
  uint32_t envc = read_u32(body + 21);
  if ((flags & ~(FLAG_CWD | FLAG_IDS)) != 0) {
    spawn_failed(id, EINVAL, "unknown flags in the spawn request");
    return;
  }
  if (argc < 1 || argc > ARGC_MAX || envc > ENVC_MAX) {
    spawn_failed(id, EINVAL, "argv or env count out of range");
    return;
  }
  if (running_tasks >= max_tasks || held_count >= HELD_MAX) {
    spawn_failed(id, EAGAIN, "too many tasks at once");
    return;
  }
  size_t expected_strings = (size_t)argc + envc + ((flags & FLAG_CWD) ? 1 : 0);
  const char *strings = (const char *)body + SPAWN_FIXED_BYTES;
  size_t strings_length = length - SPAWN_FIXED_BYTES;
  /* Exactly one NUL per field and the last byte a NUL: no NUL inside a field, nothing trailing. */
  size_t nuls = 0;
  for (size_t i = 0; i < strings_length; i++)
    if (strings[i] == '\0') nuls++;
  if (nuls != expected_strings || strings_length == 0 || strings[strings_length - 1] != '\0') {
    spawn_failed(id, EINVAL, "the spawn request's strings do not match its counts");
    return;
  }
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  char **envp = calloc((size_t)envc + 1, sizeof *envp);
  if (argv == NULL || envp == NULL) {
    free(argv);
    free(envp);
    spawn_failed(id, ENOMEM, "out of memory");
    return;
  }
  const char *cursor = strings;
  const char *cwd = NULL;
  if (flags & FLAG_CWD) {
    cwd = cursor;
    cursor += strlen(cursor) + 1;
  }
  for (uint32_t i = 0; i < argc; i++) {
    argv[i] = (char *)cursor;
    cursor += strlen(cursor) + 1;
  }
  for (uint32_t i = 0; i < envc; i++) {
    envp[i] = (char *)cursor;
    cursor += strlen(cursor) + 1;
  }
  if (argv[0][0] == '\0') {
    free(argv);
    free(envp);
    spawn_failed(id, ENOENT, "empty program name");
    return;
  }
  char **candidates = path_candidates(argv[0], envp);
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, status_pipe[2] = {-1, -1};
  int error = 0;
  if (candidates == NULL) error = ENOMEM;
  else if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
           pipe2(status_pipe, O_CLOEXEC) != 0)
    error = errno;
  pid_t pid = -1;
  if (error == 0) {
    struct child_plan plan = {
        .argv = argv,
        .envp = envp,
        .candidates = candidates,
        .cwd = cwd,
        .has_ids = (flags & FLAG_IDS) != 0,
        .uid = (uid_t)uid,
        .gid = (gid_t)gid,
        .stdout_write = out_pipe[1],
        .stderr_write = err_pipe[1],
        .status_write = status_pipe[1],
    };
    /* Every signal blocked across the clone, so no handler ever runs on the shared memory. */
    sigset_t all, previous;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &previous);
    pid = clone(child_main, child_stack + sizeof child_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                &plan);
    if (pid < 0) error = errno;
    sigprocmask(SIG_SETMASK, &previous, NULL);
  }
  close_quietly(out_pipe[1]);
  close_quietly(err_pipe[1]);
  close_quietly(status_pipe[1]);
  free_list(candidates);
  free(argv);
  free(envp);
  if (pid > 0) {
    /* CLONE_VFORK: the child has exec'd or exited by now; EOF means exec happened. */
    int child_error = 0;
    ssize_t n;
    do n = read(status_pipe[0], &child_error, sizeof child_error);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      /* It never ran the program: reap it here, it is not a task. */
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
      error = child_error == 0 ? EIO : child_error;
      pid = -1;
    }
  }
  close_quietly(status_pipe[0]);
  if (pid < 0) {
    close_quietly(out_pipe[0]);
    close_quietly(err_pipe[0]);
    spawn_failed(id, error, strerror(error));
    return;
  }
  /* Not reaped yet (only the loop reaps), so even a task that exited at once has its entry. */
  char ticks[32];
  if (read_start_ticks(pid, ticks, sizeof ticks) != 0) strcpy(ticks, "-");
  running_tasks++;
  held[held_count++] = (struct held){.id = id, .stdout_fd = out_pipe[0], .stderr_fd = err_pipe[0]};
  reply("started %u %d %s %d %d", id, (int)pid, ticks, out_pipe[0], err_pipe[0]);
}

static void handle_release(const unsigned char *body, size_t length) {
  if (length != RELEASE_BYTES) {
    reply("failed 0 EINVAL release request of the wrong size");
    return;
  }
  uint32_t id = read_u32(body + 1);
  for (size_t i = 0; i < held_count; i++) {
    if (held[i].id != id) continue;
    close_quietly(held[i].stdout_fd);
    close_quietly(held[i].stderr_fd);
    held[i] = held[--held_count];
    return;
  }
}

static void reap_children(void) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (running_tasks > 0) running_tasks--;
    if (WIFEXITED(status)) reply("exited %d %d 0", (int)pid, WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) reply("exited %d -1 %d", (int)pid, WTERMSIG(status));
  }
}

/* Handles every whole frame in the buffer; returns -1 when the stream cannot be trusted any more. */
static int handle_frames(void) {
  size_t offset = 0;
  while (frame_filled - offset >= 4) {
    size_t body_length = read_u32(frame + offset);
    if (body_length < FRAME_MIN_BYTES - 4 || body_length > max_frame_bytes) {
      /* The framing is lost: say why and leave (the supervisor treats it as a crash). */
      reply("failed 0 E2BIG request frame of %zu bytes is out of bounds", body_length);
      return -1;
    }
    if (frame_filled - offset - 4 < body_length) break;
    const unsigned char *body = frame + offset + 4;
    if (body[0] == OP_SPAWN) handle_spawn(body, body_length);
    else if (body[0] == OP_RELEASE) handle_release(body, body_length);
    else reply("failed 0 EINVAL unknown request type %u", (unsigned)body[0]);
    offset += 4 + body_length;
  }
  memmove(frame, frame + offset, frame_filled - offset);
  frame_filled -= offset;
  return 0;
}

/*
 * Closes every descriptor above 2 it inherited: the supervisor opens its own close-on-exec, but
 * one that was not (its start-up pipe, something its own parent leaked) must not reach a task.
 */
static void close_inherited_descriptors(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
#endif
  DIR *directory = opendir("/proc/self/fd");
  if (directory == NULL) return;
  int own = dirfd(directory);
  struct dirent *entry;
  while ((entry = readdir(directory)) != NULL) {
    char *end = NULL;
    long fd = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd <= 2 || fd == own) continue;
    close((int)fd);
  }
  closedir(directory);
}

static unsigned long parse_bound(const char *text, unsigned long max) {
  char *end = NULL;
  errno = 0;
  unsigned long value = strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value == 0 || value > max) return 0;
  return value;
}

int main(int argc, char **argv) {
  pid_t supervisor = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return 70;
  /* The supervisor may have died before the line above: then nobody would kill this one. */
  if (getppid() != supervisor || supervisor == 1) return 70;
  if (argc != 3) {
    fprintf(stderr, "usage: qlr-spawner <maxFrameBytes> <maxTasks>\n");
    return 64;
  }
  max_frame_bytes = parse_bound(argv[1], 64ul * 1024 * 1024);
  max_tasks = parse_bound(argv[2], 1ul << 20);
  if (max_frame_bytes == 0 || max_tasks == 0) {
    fprintf(stderr, "qlr-spawner: bounds out of range\n");
    return 64;
  }
  close_inherited_descriptors();
  frame = malloc(max_frame_bytes + 4);
  if (frame == NULL) return 70;
  /* A dead supervisor's reply pipe is an error, not a signal. A SIGTERM, SIGINT or SIGHUP
   * aimed at the supervisor's group (a service manager stopping its unit) must not end the
   * spawner: the supervisor stays to pass the signal on and write the receipts, and it needs
   * the spawner for the exit statuses. The child resets all of them before exec. */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  dev_null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (dev_null_fd < 0) return 70;
  sigemptyset(&blocked_for_signalfd);
  sigaddset(&blocked_for_signalfd, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked_for_signalfd, NULL);
  int child_signals = signalfd(-1, &blocked_for_signalfd, SFD_CLOEXEC | SFD_NONBLOCK);
  if (child_signals < 0) return 70;
  reply("ready %d", (int)getpid());
  flush_replies();
  struct pollfd watched[2] = {
      {.fd = STDIN_FILENO, .events = POLLIN},
      {.fd = child_signals, .events = POLLIN},
  };
  for (;;) {
    if (poll(watched, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 70;
    }
    if (watched[1].revents & POLLIN) {
      struct signalfd_siginfo info;
      while (read(child_signals, &info, sizeof info) > 0) {
      }
      reap_children();
    }
    if (watched[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(STDIN_FILENO, frame + frame_filled, max_frame_bytes + 4 - frame_filled);
      if (n == 0) {
        flush_replies();
        return 0; /* The supervisor closed the requests: it is leaving. */
      }
      if (n < 0 && errno != EINTR && errno != EAGAIN) return 70;
      if (n > 0) {
        frame_filled += (size_t)n;
        if (handle_frames() != 0) {
          flush_replies();
          return 65;
        }
      }
    }
    /* A SIGCHLD that arrived while a spawn ran is read on the next turn; reap anyway. */
    reap_children();
    flush_replies();
  }
}
