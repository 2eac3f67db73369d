/* For examples and benchmarks whose leader runs the worker as a copy of
 * itself: the pair for this process's role, the fork+exec of the worker
 * (the same arguments plus "--role-worker PORT") and the wait for it.
 * Header-only and C-compatible, like self_exe.h; callers use start_role
 * and end_role. */
#ifndef DS4TP_EXAMPLES_SPAWN_WORKER_H
#define DS4TP_EXAMPLES_SPAWN_WORKER_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ds4tp/ds4tp.h"
#include "self_exe.h"

/* The leader's pair when worker_port is 0, else the worker's pair that
 * connects to the leader on worker_port (logging at WARN). Returns
 * ds4tp_new's code; `who` prefixes the message printed on failure. */
static inline int new_role_pair(ds4tp_pair **tp, int transport, int worker_port,
                         const ds4tp_identity *id, const char *who) {
  ds4tp_options opt;
  ds4tp_options_init(&opt);
  opt.transport = transport;
  opt.log_level = DS4TP_LOG_WARN;
  opt.role = worker_port ? DS4TP_ROLE_WORKER : DS4TP_ROLE_LEADER;
  opt.leader_port = worker_port;
  int rc = ds4tp_new(tp, &opt, id);
  if (rc != DS4TP_OK) fprintf(stderr, "%s: %s\n", who, ds4tp_last_error());
  return rc;
}

/* Leader: forks and execs this program again as the worker, with argv
 * plus "--role-worker <the leader's port>". The child execs at once and
 * touches no other state (GPU state included). Returns the child's pid,
 * or -1 when fork failed (printed). */
static inline pid_t spawn_worker(ds4tp_pair *tp, int argc, char **argv, const char *who) {
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) {
    perror(who);
    return -1;
  }
  if (child == 0) {
    char port[16], self[4096];
    char **args = (char **)calloc((size_t)argc + 3, sizeof *args);
    if (args == NULL) _exit(127);
    for (int i = 0; i < argc; i++) args[i] = argv[i];
    snprintf(port, sizeof port, "%d", ds4tp_listen_port(tp));
    args[argc] = (char *)"--role-worker";
    args[argc + 1] = port;
    execv(self_exe(self, sizeof self, argv[0]), args);
    fprintf(stderr, "%s: exec worker: ", who);
    perror(NULL);
    _exit(127);
  }
  return child;
}

/* 0 when the worker exited with status 0, else 1. */
static inline int wait_worker(pid_t child) {
  int st = 0;
  if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
  return 0;
}

/* A rank's start: this process's pair for its role (new_role_pair) and,
 * on the leader, the worker spawned. 0 with *tp set and *child the
 * worker's pid (0 in the worker); 1 after printing why, nothing left
 * open. */
static inline int start_role(ds4tp_pair **tp, pid_t *child, int transport, int worker_port,
                      const ds4tp_identity *id, int argc, char **argv, const char *who) {
  *child = 0;
  if (new_role_pair(tp, transport, worker_port, id, who) != DS4TP_OK) return 1;
  if (worker_port == 0 && (*child = spawn_worker(*tp, argc, argv, who)) < 0) {
    ds4tp_free(*tp);
    *tp = NULL;
    return 1;
  }
  return 0;
}

/* A rank's end: frees the pair, then (leader) waits for the worker.
 * Returns `result`, or 1 when the worker failed. */
static inline int end_role(ds4tp_pair *tp, pid_t child, int result) {
  ds4tp_free(tp);
  if (child > 0 && wait_worker(child) != 0) result = 1;
  return result;
}

#endif
