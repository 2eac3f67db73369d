// Checks for code that cannot use Catch2 assertions: forked children and
// rank bodies or threads whose int return becomes an exit code.
//
//   CHILD_EXPECT(cond, pair, ...)          cond holds
//   CHILD_EXPECT_OK(rc, pair, ...)         the ds4tp status rc is DS4TP_OK
//   CHILD_EXPECT_RC(rc, want, pair, ...)   the ds4tp status rc is `want`
//
// A failed check writes one block to stderr:
//
//   tests/pair/test_pair.cpp:204: [leader rank 0 pid 4242] check failed: rc == DS4TP_ETIMEDOUT
//     status: DS4TP_EPEERCLOSED (-3), wanted DS4TP_ETIMEDOUT (-2)
//     pair failed: yes
//     library: "gate (layer 0, gate 0, seq 1): the peer closed the connection"
//
// appends the same text to the failure channel of this process (which a
// parent reads back, see run_pair and Child) and returns kChildFailed from
// the enclosing function, which must return int. Inside a void lambda or
// a thread, wrap the checks in an int-returning lambda and keep its value.
// `pair` may be NULL: the message is then ds4tp_last_error().
//
// An optional printf-style note may follow the pair:
//   CHILD_EXPECT(got == want, tp, "gate seq %llu float %llu", seq, i);
#pragma once

#include <string>

#include "ds4tp/ds4tp.h"

namespace ds4tp::test {

// What a failed check returns (and so a child's exit code).
constexpr int kChildFailed = 1;

// Reports a failed check and returns kChildFailed. `pair` may be NULL
// (then the message is ds4tp_last_error()); `have_rc` says whether `rc`
// (and `want`, when `have_want`) are worth printing.
int expect_failed(const char *file, int line, const char *cond, const ds4tp_pair *pair,
                  bool have_rc, int rc, bool have_want, int want, const char *note_fmt = nullptr,
                  ...) __attribute__((format(printf, 9, 10)));

// The name this process puts in its reports ("leader", "worker", ...);
// a harness sets it right after fork. Empty: only rank and pid.
void set_failure_label(const char *label);
// Failed checks are also written to `fd` (-1: none). Set in a child right
// after fork to the write end of a pipe its parent reads.
void set_failure_sink(int fd);
// The reports this process recorded since the last call (and clears them):
// the parent side of a rank that ran in this process.
std::string take_failures();
// Reads whatever is in the (non-blocking) read end `fd` of a child's
// failure pipe, after the child exited.
std::string drain_failures(int fd);

}  // namespace ds4tp::test

#define DS4TP_EXPECT_NOTE_(...) __VA_OPT__(, __VA_ARGS__)

// `cond` must hold.
#define CHILD_EXPECT(cond, pair, ...)                                                         \
  do {                                                                                        \
    if (!(cond))                                                                              \
      return ::ds4tp::test::expect_failed(__FILE__, __LINE__, #cond, (pair), false, 0, false, \
                                          0 DS4TP_EXPECT_NOTE_(__VA_ARGS__));                 \
  } while (0)

// `expr` (a ds4tp status) must be DS4TP_OK.
#define CHILD_EXPECT_OK(expr, pair, ...)                                                          \
  do {                                                                                            \
    int ds4tp_expect_rc_ = (expr);                                                                \
    if (ds4tp_expect_rc_ != DS4TP_OK)                                                             \
      return ::ds4tp::test::expect_failed(__FILE__, __LINE__, #expr " == DS4TP_OK", (pair), true, \
                                          ds4tp_expect_rc_, false,                                \
                                          0 DS4TP_EXPECT_NOTE_(__VA_ARGS__));                     \
  } while (0)

// `expr` (a ds4tp status) must be `want`.
#define CHILD_EXPECT_RC(expr, want, pair, ...)                                                  \
  do {                                                                                          \
    int ds4tp_expect_rc_ = (expr);                                                              \
    int ds4tp_expect_want_ = (want);                                                            \
    if (ds4tp_expect_rc_ != ds4tp_expect_want_)                                                 \
      return ::ds4tp::test::expect_failed(__FILE__, __LINE__, #expr " == " #want, (pair), true, \
                                          ds4tp_expect_rc_, true,                               \
                                          ds4tp_expect_want_ DS4TP_EXPECT_NOTE_(__VA_ARGS__));  \
  } while (0)
