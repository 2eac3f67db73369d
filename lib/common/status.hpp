// Names and one-line meanings of the library's status codes and transport
// kinds. The C calls (ds4tp_strerror, ds4tp_err_name, ds4tp_transport_name)
// return these; lib/ uses them directly, since nothing below capi/ may call
// the C API (the build links lib/ alone to check it).
#pragma once

namespace ds4tp {

// "operation timed out" for DS4TP_ETIMEDOUT; "unknown status" otherwise.
const char *status_message(int status);
// "DS4TP_ETIMEDOUT"; "DS4TP_UNKNOWN" for a code the library does not have.
const char *status_name(int status);
// "tcp", "shm", "rdma", "auto"; "?" for a kind not built into this library.
const char *transport_name(int transport);

}  // namespace ds4tp
