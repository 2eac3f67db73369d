/*
 * libds4tp: tensor-parallel transport between the ranks of an LLM engine.
 *
 * One public header, C99 and C++. Every function returns an int status
 * (0 = DS4TP_OK, negative = a DS4TP_E* code) unless it says otherwise; a
 * failed call leaves a message in words on the handle (ds4tp_errmsg) and on
 * the calling thread (ds4tp_last_error).
 *
 * Lifecycle (both ranks):
 *   ds4tp_options_init + ds4tp_identity_init, fill in
 *   ds4tp_new          validate, leader binds its listener (port readable)
 *   ds4tp_connect      blocking bring-up: dial/accept, identity hello,
 *                      transport negotiation, data connection
 *   ds4tp_attach_slab  hand over (or let the library allocate) the slab
 *   ds4tp_gate_exchange / batch / big, many times
 *   ds4tp_free
 *
 * Threading: one thread may run gates (the data plane) while another runs
 * control calls; gates themselves must not run concurrently with each
 * other. Query functions (ds4tp_failed, ds4tp_errmsg, ...) may be called
 * from any thread at any time.
 */
#ifndef DS4TP_H
#define DS4TP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DS4TP_API __attribute__((visibility("default")))
#else
#define DS4TP_API
#endif

/* ------------------------------------------------------------------ */
/* Versions. Same major version = same ABI.                             */

#define DS4TP_VERSION_MAJOR 0
#define DS4TP_VERSION_MINOR 1
#define DS4TP_VERSION_PATCH 0
#define DS4TP_VERSION_HEX                                                  \
  ((DS4TP_VERSION_MAJOR << 16) | (DS4TP_VERSION_MINOR << 8) |              \
   DS4TP_VERSION_PATCH)
/* Wire protocol version carried in the hello; both ranks must agree. */
#define DS4TP_PROTOCOL_VERSION 3

/* Returns DS4TP_VERSION_HEX of the linked library. */
DS4TP_API unsigned ds4tp_version(void);
/* Returns "MAJOR.MINOR.PATCH" of the linked library (static storage). */
DS4TP_API const char *ds4tp_version_string(void);
/* Returns the wire protocol version the linked library speaks. */
DS4TP_API unsigned ds4tp_protocol_version(void);

/* ------------------------------------------------------------------ */
/* Status codes. Numbers are pinned: they never change once released.   */

#define DS4TP_STATUS_MAP(XX)                                               \
  XX(OK, 0, "success")                                                     \
  XX(EINVAL, -1, "invalid argument")                                       \
  XX(ETIMEDOUT, -2, "timed out")                                           \
  XX(EPEERCLOSED, -3, "peer closed the connection")                        \
  XX(EIDENTITY, -4, "engine identity mismatch")                            \
  XX(EDESYNC, -5, "ranks out of lockstep")                                 \
  XX(EPROTO, -6, "protocol error")                                         \
  XX(EAUTH, -7, "authentication failed")                                   \
  XX(EIO, -8, "i/o error")                                                 \
  XX(EUNSUPPORTED, -9, "not supported")                                    \
  XX(ECANCELLED, -10, "cancelled")                                         \
  XX(EFAILED, -11, "handle failed earlier")                                \
  XX(EVERSION, -12, "protocol version mismatch")                           \
  XX(ESTATE, -13, "call not valid in this state")                          \
  XX(ENOMEM, -14, "out of memory")                                         \
  XX(EDIVERGED, -15, "lockstep state diverged")                            \
  XX(EREMOTE, -16, "peer reported a failure")

typedef enum ds4tp_status {
#define DS4TP_STATUS_ENUM_(name, value, msg) DS4TP_##name = value,
  DS4TP_STATUS_MAP(DS4TP_STATUS_ENUM_)
#undef DS4TP_STATUS_ENUM_
  DS4TP_STATUS_MIN_ = -16
} ds4tp_status;

/* Short description of a status code; never NULL. */
DS4TP_API const char *ds4tp_strerror(int status);
/* Symbolic name of a status code ("DS4TP_ETIMEDOUT"); never NULL. */
DS4TP_API const char *ds4tp_err_name(int status);
/* Message of the last failed call made by this thread, "" if none. Valid
 * until this thread's next ds4tp call. */
DS4TP_API const char *ds4tp_last_error(void);

/* ------------------------------------------------------------------ */
/* Constants.                                                           */

enum {
  DS4TP_GATE_ATTN = 0,
  DS4TP_GATE_FFN = 1,
  DS4TP_GATES_PER_LAYER = 2,
  /* Rows of a verify-block batch gate (seed row plus drafts). */
  DS4TP_BATCH_MAX_ROWS = 8,
  /* Batch gate indices per layer; batch index = layer * 2 + gate. */
  DS4TP_BATCH_GATES_PER_LAYER = 2,
  /* 64-bit words of the gate slot mask: up to 256 slots (128 layers). */
  DS4TP_GATE_MASK_WORDS = 4,
  /* Largest opaque engine blob carried in the hello. */
  DS4TP_ENGINE_BLOB_MAX = 4096
};

typedef enum ds4tp_role {
  DS4TP_ROLE_NONE = 0,
  DS4TP_ROLE_LEADER = 1, /* rank 0: listens, drives the lockstep */
  DS4TP_ROLE_WORKER = 2  /* rank 1: dials the leader, mirrors it */
} ds4tp_role;

typedef enum ds4tp_transport {
  DS4TP_TRANSPORT_AUTO = 0, /* best both ranks offer */
  DS4TP_TRANSPORT_TCP = 1,
  DS4TP_TRANSPORT_SHM = 2,
  DS4TP_TRANSPORT_RDMA = 3
} ds4tp_transport;

/* Lower-case name of a transport value ("tcp"); "?" when unknown. */
DS4TP_API const char *ds4tp_transport_name(int transport);

/* Whether `transport` (TCP, SHM or RDMA) can run on this host: returns 1
 * or 0, and writes what was found or what is missing (e.g. "libibverbs
 * found no RDMA devices") into `why` (NUL-terminated, truncated to
 * `why_len`; may be NULL). No network I/O. Returns 0 for AUTO or an
 * unknown value. */
DS4TP_API int ds4tp_transport_available(int transport, char *why,
                                        size_t why_len);

/* The transport AUTO would negotiate with a peer that offers what this
 * host offers (as ds4tp_transport_available finds it): with `same_host`
 * nonzero for a peer on this host (shm first), zero for one on another
 * host (rdma, else tcp). The rule is the one bring-up applies; the pair's
 * own offer also weighs its slab size and RDMA options, so after
 * ds4tp_connect, ds4tp_transport_active says what was chosen. No network
 * I/O. Returns a DS4TP_TRANSPORT_* value, AUTO when this host offers no
 * transport. */
DS4TP_API int ds4tp_transport_auto(int same_host);

typedef enum ds4tp_log_level {
  DS4TP_LOG_ERROR = 0,
  DS4TP_LOG_WARN = 1,
  DS4TP_LOG_INFO = 2, /* bring-up progress */
  DS4TP_LOG_DEBUG = 3
} ds4tp_log_level;

/* Log sink. Called from the thread that made the ds4tp call, never from
 * inside a gate exchange. `msg` has no trailing newline. */
typedef void (*ds4tp_log_fn)(void *user_data, int level, const char *msg);

/* ------------------------------------------------------------------ */
/* API stability before 1.0. Everything in this header and the topic    */
/* headers it includes changes only with the major version (and grows   */
/* only at the end of a sized struct), except what is marked            */
/* experimental: the groups (ds4tp_groups.h) and GPU streams            */
/* (ds4tp_streams.h) topics, whose calls are declared with              */
/* DS4TP_EXPERIMENTAL_API and may still change in a minor release.      */
/* Define DS4TP_NO_EXPERIMENTAL before the include to leave them out    */
/* (a build that must stay on the stable API), or                       */
/* DS4TP_WARN_EXPERIMENTAL to get a compiler warning at each use.       */
#if defined(DS4TP_WARN_EXPERIMENTAL) && (defined(__GNUC__) || defined(__clang__))
#define DS4TP_EXPERIMENTAL_API \
  DS4TP_API __attribute__((deprecated("experimental libds4tp API: may change before 1.0")))
#else
#define DS4TP_EXPERIMENTAL_API DS4TP_API
#endif

/* The topics, each its own header: */
#include "ds4tp_pair.h"
#include "ds4tp_integration.h"
#include "ds4tp_control.h"
#include "ds4tp_stats.h"
#ifndef DS4TP_NO_EXPERIMENTAL
#include "ds4tp_groups.h"
#include "ds4tp_group_requests.h"
#include "ds4tp_streams.h"
#endif

#ifdef __cplusplus
}
#endif
#endif /* DS4TP_H */
