/*
 * gantry_spank.c — gantry's SPANK plugin: health gating and site tuning for every job step.
 *
 * Options (srun, sbatch, salloc):
 *   --gantry-preflight[=quick|standard]  before the step's tasks start on a node, run
 *       `gantry preflight --site S --level L --drain` there (as root, no shell, with a
 *       watchdog). A failing node refuses the step with the checks that failed; the drain
 *       policy (owned `gantry:<check>:<detail>` reasons, operators' reasons never touched)
 *       is applied by gantry itself.
 *   --gantry-env[=SITE]  put the site's NCCL/MPI tuning (KEY=VALUE lines of
 *       <env_dir>/<SITE>.env) into the tasks' environment; variables the user set win.
 *
 * plugstack.conf (written by `gantry site install-plugins`; arguments are key=value):
 *   required /opt/gantry/lib/gantry_spank.so gantry=/opt/gantry/bin/gantry \
 *       site=/opt/gantry/etc/site.yaml level=quick timeout=120 \
 *       env_dir=/opt/gantry/etc/env default_env=mysite preflight_env=/opt/gantry/etc/preflight.env
 *   gantry, site: absolute paths (required for --gantry-preflight); level: default level;
 *   timeout: seconds (1..3600); env_dir, default_env: for --gantry-env; preflight_env:
 *   optional KEY=VALUE file added to the preflight's environment (tool paths such as
 *   GANTRY_NVIDIA_SMI, the doors gantry's own checks read).
 *
 * Hooks (remote context = slurmstepd, once per node and step):
 *   slurm_spank_init            parse arguments, register options (local, allocator, remote)
 *   slurm_spank_init_post_opt   remote, still root: run the preflight, remember the outcome
 *   slurm_spank_user_init       remote, before tasks fork, after the step's stderr reaches the
 *                               user: report a failed preflight and refuse the step; apply
 *                               --gantry-env
 * Every log line starts with "gantry: ". Functions have one cleanup path (label `out`).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#define GANTRY_EXPORT __attribute__((visibility("default")))

#pragma GCC visibility push(default)
SPANK_PLUGIN(gantry, 1)
#pragma GCC visibility pop

extern char **environ;

/* ---- logging: every line prefixed ---------------------------------------------------- */

#define gantry_error(...) slurm_error("gantry: " __VA_ARGS__)
#define gantry_info(...) slurm_info("gantry: " __VA_ARGS__)
#define gantry_verbose(...) slurm_verbose("gantry: " __VA_ARGS__)
#define gantry_debug(...) slurm_debug("gantry: " __VA_ARGS__)

/* Logs a failed spank_* call with file:line and jumps to the function's cleanup. */
#define spank_check(call)                                                                \
    do {                                                                                 \
        spank_err_t spank_check_rc_ = (call);                                            \
        if (spank_check_rc_ != ESPANK_SUCCESS) {                                         \
            gantry_error("%s:%d: %s failed: %s", __FILE__, __LINE__, #call,              \
                         spank_strerror(spank_check_rc_));                               \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

/* ---- configuration (plugstack.conf arguments) ------------------------------------------ */

#define LEVEL_MAX 16
#define SITE_NAME_MAX 64
#define OUTPUT_MAX 65536   /* bytes of preflight output kept for the report */
#define RELAY_LINES_MAX 12 /* lines of it shown to the user */
#define ENV_LINE_MAX 4096
#define KILL_WAIT_S 5.0    /* how long to wait for the killed preflight to be reaped */

typedef struct {
    char gantry[PATH_MAX];        /* absolute path of the gantry executable */
    char site[PATH_MAX];          /* absolute path of the site config */
    char level[LEVEL_MAX];        /* default preflight level: quick | standard */
    long timeout_s;               /* preflight watchdog, seconds */
    char env_dir[PATH_MAX];       /* directory of <SITE>.env files */
    char default_env[SITE_NAME_MAX + 1]; /* SITE when --gantry-env has no value */
    char preflight_env[PATH_MAX]; /* optional KEY=VALUE file for the preflight's env */
} gantry_config_t;

static gantry_config_t config = {.level = "quick", .timeout_s = 120};

/* What the user asked for (option callbacks) and what the preflight found. */
static int want_preflight = 0;
static char want_level[LEVEL_MAX];
static int want_env = 0;
static char want_env_site[SITE_NAME_MAX + 1];

static int preflight_ran = 0;
static int preflight_failed = 0;
static char preflight_node[256];
static char preflight_report[OUTPUT_MAX];

static int level_allowed(const char *level) {
    return strcmp(level, "quick") == 0 || strcmp(level, "standard") == 0;
}

/* SITE names: [A-Za-z0-9_.-]+, not starting with '.', at most SITE_NAME_MAX characters. */
static int site_name_allowed(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > SITE_NAME_MAX || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!(isalnum(c) || c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int copy_value(char *dst, size_t cap, const char *key, const char *value) {
    int rc = -1;
    if (strlen(value) >= cap) {
        gantry_error("plugstack.conf: %s=%s is too long (at most %zu characters)", key, value,
                     cap - 1);
        goto out;
    }
    memcpy(dst, value, strlen(value) + 1);
    rc = 0;
out:
    return rc;
}

static int copy_abs_path(char *dst, const char *key, const char *value) {
    int rc = -1;
    if (value[0] != '/') {
        gantry_error("plugstack.conf: %s=%s is not allowed (expected an absolute path)", key,
                     value);
        goto out;
    }
    rc = copy_value(dst, PATH_MAX, key, value);
out:
    return rc;
}

/* Parse the plugstack.conf arguments (key=value each) into `config`. */
static int parse_args(int ac, char **av) {
    int rc = -1;
    for (int i = 0; i < ac; i++) {
        char key[32];
        const char *eq = strchr(av[i], '=');
        size_t klen = eq ? (size_t)(eq - av[i]) : 0;
        if (eq == NULL || klen == 0 || klen >= sizeof key) {
            gantry_error("plugstack.conf: argument '%s' is not allowed (expected key=value)",
                         av[i]);
            goto out;
        }
        memcpy(key, av[i], klen);
        key[klen] = '\0';
        const char *value = eq + 1;
        if (strcmp(key, "gantry") == 0) {
            if (copy_abs_path(config.gantry, key, value) < 0)
                goto out;
        } else if (strcmp(key, "site") == 0) {
            if (copy_abs_path(config.site, key, value) < 0)
                goto out;
        } else if (strcmp(key, "env_dir") == 0) {
            if (copy_abs_path(config.env_dir, key, value) < 0)
                goto out;
        } else if (strcmp(key, "preflight_env") == 0) {
            if (copy_abs_path(config.preflight_env, key, value) < 0)
                goto out;
        } else if (strcmp(key, "level") == 0) {
            if (!level_allowed(value)) {
                gantry_error("plugstack.conf: level=%s is not allowed (expected quick or "
                             "standard)", value);
                goto out;
            }
            if (copy_value(config.level, sizeof config.level, key, value) < 0)
                goto out;
        } else if (strcmp(key, "default_env") == 0) {
            if (!site_name_allowed(value)) {
                gantry_error("plugstack.conf: default_env=%s is not allowed (expected a site "
                             "name of letters, digits, '_', '.', '-')", value);
                goto out;
            }
            if (copy_value(config.default_env, sizeof config.default_env, key, value) < 0)
                goto out;
        } else if (strcmp(key, "timeout") == 0) {
            char *end = NULL;
            errno = 0;
            long t = strtol(value, &end, 10);
            if (errno != 0 || end == value || *end != '\0' || t < 1 || t > 3600) {
                gantry_error("plugstack.conf: timeout=%s is not allowed (expected seconds in "
                             "1..3600)", value);
                goto out;
            }
            config.timeout_s = t;
        } else {
            gantry_error("plugstack.conf: unknown argument '%s' (allowed: gantry, site, "
                         "level, timeout, env_dir, default_env, preflight_env)", key);
            goto out;
        }
    }
    rc = 0;
out:
    return rc;
}

/* ---- options ----------------------------------------------------------------------------- */

static int on_preflight_option(int val, const char *optarg, int remote) {
    int rc = -1;
    (void)val;
    const char *level = (optarg == NULL || optarg[0] == '\0') ? config.level : optarg;
    if (!level_allowed(level)) {
        gantry_error("--gantry-preflight=%s is not allowed (expected quick or standard)",
                     level);
        goto out;
    }
    if (copy_value(want_level, sizeof want_level, "--gantry-preflight", level) < 0)
        goto out;
    want_preflight = 1;
    gantry_debug("--gantry-preflight=%s (%s)", want_level, remote ? "remote" : "local");
    rc = 0;
out:
    return rc;
}

static int on_env_option(int val, const char *optarg, int remote) {
    int rc = -1;
    (void)val;
    const char *site = (optarg == NULL || optarg[0] == '\0') ? config.default_env : optarg;
    if (site[0] == '\0') {
        gantry_error("--gantry-env needs a site name: no default_env in plugstack.conf "
                     "(use --gantry-env=SITE)");
        goto out;
    }
    if (!site_name_allowed(site)) {
        gantry_error("--gantry-env=%s is not allowed (expected a site name of letters, "
                     "digits, '_', '.', '-')", site);
        goto out;
    }
    if (config.env_dir[0] != '\0' && !remote) {
        /* On a login node that has the install, catch a wrong SITE before submitting. */
        char path[PATH_MAX];
        struct stat st;
        int n = snprintf(path, sizeof path, "%s/%s.env", config.env_dir, site);
        if (n < 0 || (size_t)n >= sizeof path) {
            gantry_error("--gantry-env=%s: path of its env file is too long", site);
            goto out;
        }
        if (stat(config.env_dir, &st) == 0 && stat(path, &st) != 0) {
            gantry_error("--gantry-env=%s: no such site (no file %s)", site, path);
            goto out;
        }
    }
    if (copy_value(want_env_site, sizeof want_env_site, "--gantry-env", site) < 0)
        goto out;
    want_env = 1;
    rc = 0;
out:
    return rc;
}

static struct spank_option preflight_option = {
    "gantry-preflight", "quick|standard",
    "Run gantry's node health checks on every node before the step starts; a failing node "
    "refuses the step and is drained (gantry:<check> reason). Default level: the site's.",
    2, 0, on_preflight_option};

static struct spank_option env_option = {
    "gantry-env", "SITE",
    "Put the site's NCCL/MPI tuning into the tasks' environment (variables you set win). "
    "Default SITE: the installed site.",
    2, 0, on_env_option};

/* ---- KEY=VALUE files ------------------------------------------------------------------ */

typedef int (*env_entry_f)(const char *key, const char *value, void *ctx);

static int key_allowed(const char *key) {
    if (!(isalpha((unsigned char)key[0]) || key[0] == '_'))
        return 0;
    for (const char *p = key; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return 0;
    return 1;
}

/* Calls `fn` for each KEY=VALUE line of `path` ('#' comments and blank lines skipped; the
 * value is literal: no quotes, no expansion). Returns 0, or -1 after logging file:line. */
static int read_env_file(const char *path, env_entry_f fn, void *ctx) {
    int rc = -1;
    FILE *f = NULL;
    char line[ENV_LINE_MAX];
    int lineno = 0;
    f = fopen(path, "re");
    if (f == NULL) {
        gantry_error("cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        else if (!feof(f)) {
            gantry_error("%s:%d: line longer than %d characters", path, lineno,
                         ENV_LINE_MAX - 2);
            goto out;
        }
        if (n == 0 || line[0] == '#')
            continue;
        char *eq = strchr(line, '=');
        if (eq == NULL) {
            gantry_error("%s:%d: '%s' is not allowed (expected KEY=VALUE)", path, lineno, line);
            goto out;
        }
        *eq = '\0';
        if (!key_allowed(line)) {
            gantry_error("%s:%d: '%s' is not a variable name (expected [A-Za-z_][A-Za-z0-9_]*)",
                         path, lineno, line);
            goto out;
        }
        if (fn(line, eq + 1, ctx) < 0)
            goto out;
    }
    if (ferror(f)) {
        gantry_error("cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (f != NULL)
        fclose(f);
    return rc;
}

/* ---- the preflight child ---------------------------------------------------------------- */

/* The preflight's environment: slurmstepd's own (the node's, never the user's job env),
 * SLURMD_NODENAME, and the preflight_env file; later entries replace earlier ones. */
typedef struct {
    char **entries; /* "KEY=VALUE" strings, NULL-terminated, owned */
    size_t count;
    size_t cap;
} env_list_t;

static void env_list_free(env_list_t *list) {
    for (size_t i = 0; i < list->count; i++)
        free(list->entries[i]);
    free(list->entries);
    list->entries = NULL;
    list->count = list->cap = 0;
}

static int env_list_set(const char *key, const char *value, void *ctx) {
    int rc = -1;
    env_list_t *list = ctx;
    size_t klen = strlen(key);
    char *entry = NULL;
    if (asprintf(&entry, "%s=%s", key, value) < 0) {
        gantry_error("out of memory building the preflight environment");
        entry = NULL;
        goto out;
    }
    for (size_t i = 0; i < list->count; i++) {
        if (strncmp(list->entries[i], key, klen) == 0 && list->entries[i][klen] == '=') {
            free(list->entries[i]);
            list->entries[i] = entry;
            entry = NULL;
            rc = 0;
            goto out;
        }
    }
    if (list->count + 2 > list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 64;
        char **grown = realloc(list->entries, cap * sizeof *grown);
        if (grown == NULL) {
            gantry_error("out of memory building the preflight environment");
            goto out;
        }
        list->entries = grown;
        list->cap = cap;
    }
    list->entries[list->count++] = entry;
    list->entries[list->count] = NULL;
    entry = NULL;
    rc = 0;
out:
    free(entry);
    return rc;
}

static int build_preflight_env(env_list_t *list, const char *node) {
    int rc = -1;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        char key[256];
        const char *eq = strchr(*e, '=');
        size_t klen = eq ? (size_t)(eq - *e) : 0;
        if (eq == NULL || klen == 0 || klen >= sizeof key)
            continue;
        memcpy(key, *e, klen);
        key[klen] = '\0';
        if (env_list_set(key, eq + 1, list) < 0)
            goto out;
    }
    if (node[0] != '\0' && env_list_set("SLURMD_NODENAME", node, list) < 0)
        goto out;
    if (config.preflight_env[0] != '\0' &&
        read_env_file(config.preflight_env, env_list_set, list) < 0)
        goto out;
    if (list->entries == NULL && env_list_set("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", list) < 0)
        goto out;
    rc = 0;
out:
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for `pid` until `deadline` (now_s() clock). Returns 1 with *wstatus when it ended, 0
 * when the deadline came first, -1 on a waitpid error (logged). Polls with pauses growing from
 * 1 ms to 50 ms: the child may have closed its output long before it exits. */
static int wait_until(pid_t pid, double deadline, int *wstatus) {
    long pause_ns = 1000000L;
    for (;;) {
        pid_t done = waitpid(pid, wstatus, WNOHANG);
        if (done == pid)
            return 1;
        if (done < 0 && errno != EINTR) {
            gantry_error("%s:%d: waitpid: %s", __FILE__, __LINE__, strerror(errno));
            return -1;
        }
        double left = deadline - now_s();
        if (left <= 0)
            return 0;
        long left_ns = left < 1.0 ? (long)(left * 1e9) + 1 : 1000000000L;
        struct timespec pause = {0, pause_ns < left_ns ? pause_ns : left_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 50000000L)
            pause_ns *= 2;
    }
}

/* Child side: own session and process group (so the watchdog can kill the whole tree),
 * output to the pipe, nothing else inherited, then exec. Only async-signal-safe calls. */
static void exec_child(int out_fd, char *const argv[], char *const envp[]) {
    int devnull = open("/dev/null", O_RDONLY);
    setsid();
    if (devnull >= 0)
        dup2(devnull, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    if (close_range(3, ~0U, 0) != 0) {
        long max_fd = sysconf(_SC_OPEN_MAX);
        for (long fd = 3; fd < (max_fd > 0 && max_fd < 65536 ? max_fd : 65536); fd++)
            close((int)fd);
    }
    execve(argv[0], argv, envp);
    static const char msg[] = "error: gantry SPANK plugin: cannot execute the gantry program\n";
    ssize_t ignored = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
}

/* Runs `gantry preflight` for `level` on this node. Sets *status to the exit status (or -1
 * when killed by the watchdog / a signal); its output (stdout+stderr) lands in `output`.
 * The watchdog covers reading the output and waiting for the exit: past config.timeout_s the
 * whole process group is killed (also when the program closed its output and kept running).
 * Returns 0 when it ran to an end, -1 when it could not be started. */
static int run_preflight(const char *level, const char *node, char *output, size_t cap,
                         int *status, int *timed_out) {
    int rc = -1;
    int pipefd[2] = {-1, -1};
    pid_t pid = -1;
    env_list_t env = {0};
    size_t used = 0;
    char *argv[] = {config.gantry, "preflight", "--site", config.site, "--level",
                    (char *)level, "--drain", NULL};
    *status = -1;
    *timed_out = 0;
    output[0] = '\0';

    if (build_preflight_env(&env, node) < 0)
        goto out;
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        gantry_error("%s:%d: pipe2: %s", __FILE__, __LINE__, strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        gantry_error("%s:%d: fork: %s", __FILE__, __LINE__, strerror(errno));
        goto out;
    }
    if (pid == 0)
        exec_child(pipefd[1], argv, env.entries);
    close(pipefd[1]);
    pipefd[1] = -1;

    double deadline = now_s() + (double)config.timeout_s;
    for (;;) { /* read until EOF or the deadline */
        double left = deadline - now_s();
        if (left <= 0) {
            *timed_out = 1;
            break;
        }
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int ready = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0) {
            gantry_error("%s:%d: poll: %s", __FILE__, __LINE__, strerror(errno));
            *timed_out = 1;
            break;
        }
        if (ready == 0)
            continue;
        char chunk[4096];
        ssize_t got = read(pipefd[0], chunk, sizeof chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        size_t keep = (size_t)got;
        if (used + keep > cap - 1)
            keep = cap - 1 - used; /* keep the first `cap` bytes, drain the rest */
        memcpy(output + used, chunk, keep);
        used += keep;
        output[used] = '\0';
    }
    int wstatus = 0;
    int ended = *timed_out ? 0 : wait_until(pid, deadline, &wstatus); /* reap it by the deadline */
    if (ended == 1)
        *status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    if (ended == 0) { /* past the deadline: kill its whole process group, then reap it */
        *timed_out = 1;
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL); /* in case it had not reached setsid() yet */
        if (wait_until(pid, now_s() + KILL_WAIT_S, &wstatus) == 0)
            gantry_error("preflight process %d not reaped %.0f s after SIGKILL (left behind)",
                         (int)pid, KILL_WAIT_S);
    }
    rc = 0;
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    env_list_free(&env);
    return rc;
}

/* The node this slurmstepd serves: slurmd exports SLURMD_NODENAME (several emulated nodes
 * may share a host), else the job env's, else the short host name. */
static void node_name(spank_t sp, char *buf, size_t cap) {
    const char *from_daemon = getenv("SLURMD_NODENAME");
    buf[0] = '\0';
    if (from_daemon != NULL && from_daemon[0] != '\0' && strlen(from_daemon) < cap) {
        memcpy(buf, from_daemon, strlen(from_daemon) + 1);
        return;
    }
    if (spank_getenv(sp, "SLURMD_NODENAME", buf, (int)cap) == ESPANK_SUCCESS && buf[0] != '\0')
        return;
    if (gethostname(buf, cap) != 0)
        buf[0] = '\0';
    buf[cap - 1] = '\0';
    char *dot = strchr(buf, '.');
    if (dot != NULL)
        *dot = '\0';
}

/* The step ids gated: ordinary steps and the batch script; not the extern/interactive ones. */
static int step_is_gated(spank_t sp) {
    uint32_t step = 0;
    if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
        return 1;
    return step < SLURM_MAX_NORMAL_STEP_ID || step == SLURM_BATCH_SCRIPT;
}

/* Log the lines of the preflight output that say what failed (at most RELAY_LINES_MAX). */
static void relay_failures(const char *node) {
    int shown = 0;
    char *save = NULL;
    for (char *line = strtok_r(preflight_report, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ')
            line++;
        if (strstr(line, "FAIL") == NULL && strncmp(line, "error:", 6) != 0 &&
            strncmp(line, "gantry preflight:", 17) != 0)
            continue;
        if (shown++ == RELAY_LINES_MAX) {
            gantry_error("%s: ... (more in the node's slurmd log)", node);
            break;
        }
        gantry_error("%s: %s", node, line);
    }
}

/* ---- hooks -------------------------------------------------------------------------------- */

GANTRY_EXPORT int slurm_spank_init(spank_t sp, int ac, char **av) {
    int rc = -1;
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE) {
        rc = 0;
        goto out;
    }
    if (parse_args(ac, av) < 0)
        goto out;
    spank_check(spank_option_register(sp, &preflight_option));
    spank_check(spank_option_register(sp, &env_option));
    rc = 0;
out:
    return rc;
}

GANTRY_EXPORT int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
    int rc = -1;
    int status = -1, timed_out = 0;
    (void)ac;
    (void)av;
    if (!spank_remote(sp) || !want_preflight || !step_is_gated(sp)) {
        rc = 0;
        goto out;
    }
    if (config.gantry[0] == '\0' || config.site[0] == '\0') {
        gantry_error("--gantry-preflight: plugstack.conf lacks gantry= or site= (run "
                     "`gantry site install-plugins`)");
        preflight_ran = preflight_failed = 1;
        snprintf(preflight_report, sizeof preflight_report, "error: plugin not configured");
        rc = 0; /* reported (and the step refused) in user_init, where the user sees it */
        goto out;
    }
    node_name(sp, preflight_node, sizeof preflight_node);
    double start = now_s();
    if (run_preflight(want_level, preflight_node, preflight_report, sizeof preflight_report,
                      &status, &timed_out) < 0) {
        preflight_ran = preflight_failed = 1;
        snprintf(preflight_report, sizeof preflight_report,
                 "error: could not start %s (see the slurmd log)", config.gantry);
        rc = 0;
        goto out;
    }
    preflight_ran = 1;
    preflight_failed = status != 0;
    if (timed_out) {
        snprintf(preflight_report, sizeof preflight_report,
                 "error: gantry preflight did not finish within %ld s (killed)",
                 config.timeout_s);
    } else if (status != 0 && status != 1) {
        /* not a verdict: gantry itself failed (bad site config, missing tool); keep its
         * error line for the user */
        size_t n = strlen(preflight_report);
        if (n == 0)
            snprintf(preflight_report, sizeof preflight_report,
                     "error: gantry preflight exited with status %d", status);
    }
    gantry_info("preflight (%s) on %s: %s in %.1f s", want_level, preflight_node,
                timed_out ? "TIMEOUT" : status == 0 ? "pass" : status == 1 ? "FAIL" : "ERROR",
                now_s() - start);
    rc = 0;
out:
    return rc;
}

static int set_task_env(const char *key, const char *value, void *ctx) {
    int rc = -1;
    spank_t sp = ctx;
    char existing[2];
    spank_err_t got = spank_getenv(sp, key, existing, sizeof existing);
    if (got == ESPANK_SUCCESS || got == ESPANK_NOSPACE) {
        gantry_verbose("--gantry-env: %s kept (set by the user)", key);
        rc = 0;
        goto out;
    }
    spank_check(spank_setenv(sp, key, value, 0));
    rc = 0;
out:
    return rc;
}

GANTRY_EXPORT int slurm_spank_user_init(spank_t sp, int ac, char **av) {
    int rc = -1;
    (void)ac;
    (void)av;
    if (!spank_remote(sp)) {
        rc = 0;
        goto out;
    }
    if (preflight_ran && preflight_failed) {
        /* Reported here, once per node, where the user sees it; every task then exits 1 in
         * task_init without running (a failing user_init would leave srun's status 0). */
        gantry_error("node %s failed preflight (%s); the step's tasks do not run there",
                     preflight_node[0] ? preflight_node : "?", want_level);
        relay_failures(preflight_node[0] ? preflight_node : "?");
        rc = 0;
        goto out;
    }
    if (want_env) {
        char path[PATH_MAX];
        if (config.env_dir[0] == '\0') {
            gantry_error("--gantry-env: plugstack.conf lacks env_dir= (run `gantry site "
                         "install-plugins`)");
            goto out;
        }
        int n = snprintf(path, sizeof path, "%s/%s.env", config.env_dir, want_env_site);
        if (n < 0 || (size_t)n >= sizeof path) {
            gantry_error("--gantry-env=%s: path of its env file is too long", want_env_site);
            goto out;
        }
        if (read_env_file(path, set_task_env, sp) < 0) {
            gantry_error("--gantry-env=%s: the site's environment could not be applied",
                         want_env_site);
            goto out;
        }
        spank_check(spank_setenv(sp, "GANTRY_ENV_SITE", want_env_site, 1));
    }
    rc = 0;
out:
    return rc;
}

GANTRY_EXPORT int slurm_spank_task_init(spank_t sp, int ac, char **av) {
    int rc = -1;
    (void)ac;
    (void)av;
    if (!spank_remote(sp) || !(preflight_ran && preflight_failed)) {
        rc = 0;
        goto out;
    }
    gantry_error("%s: task refused: the node failed preflight", preflight_node);
out:
    return rc;
}
