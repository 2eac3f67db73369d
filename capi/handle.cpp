// Status recording and the version and status-name calls.
#include "handle.hpp"

#include "common/status.hpp"

namespace ds4tp::capi {

thread_local std::string t_last_error;

int finish(ds4tp_pair *p, int rc, const Error &err) {
  if (rc == DS4TP_OK) return rc;
  t_last_error = err.message.empty() ? ds4tp::status_message(rc) : err.message;
  if (Pair *x = unwrap(p)) {
    Error e = err;
    if (e.message.empty()) e.message = t_last_error;
    x->record(e, false);
  }
  return rc;
}

int invalid(ds4tp_pair *p, const char *what) {
  Error e;
  e.set(DS4TP_EINVAL, "{}", what);
  return finish(p, DS4TP_EINVAL, e);
}

int check_pair(const ds4tp_pair *p) {
  return unwrap(p) != nullptr ? DS4TP_OK : invalid(nullptr, "pair is NULL");
}

int check_live(const ds4tp_pair *p) {
  if (int rc = check_pair(p)) return rc;
  if (!p->impl->failed()) return DS4TP_OK;
  Error e;
  p->impl->refuse(e);
  t_last_error = e.message;
  return DS4TP_EFAILED;
}

}  // namespace ds4tp::capi

using namespace ds4tp::capi;

extern "C" {

unsigned ds4tp_version(void) { return DS4TP_VERSION_HEX; }

const char *ds4tp_version_string(void) {
#define DS4TP_STR2_(x) #x
#define DS4TP_STR_(x) DS4TP_STR2_(x)
  return DS4TP_STR_(DS4TP_VERSION_MAJOR) "." DS4TP_STR_(DS4TP_VERSION_MINOR) "." DS4TP_STR_(
      DS4TP_VERSION_PATCH);
}

unsigned ds4tp_protocol_version(void) { return DS4TP_PROTOCOL_VERSION; }

const char *ds4tp_strerror(int status) { return ds4tp::status_message(status); }

const char *ds4tp_err_name(int status) { return ds4tp::status_name(status); }

const char *ds4tp_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
