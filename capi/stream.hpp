// Conversions shared by the pair's and the group's stream calls
// (capi/service.cpp, capi/group.cpp).
#pragma once

#include "common/error.hpp"
#include "ds4tp/ds4tp.h"
#include "service/gate_service.hpp"
#include "service/stream_words.hpp"

namespace ds4tp::capi {

// Checked service options (NULL = defaults); EINVAL naming the field.
int service_config_from_c(const ds4tp_gate_service_options *opt, ServiceConfig &c, Error &err);
// Checked stream options (NULL = defaults) into *out; EINVAL naming the field.
int stream_options_from_c(const ds4tp_stream_options *opt, ds4tp_stream_options &out, Error &err);
// Describes `w` in the caller's struct (as much as out->size holds);
// EINVAL for NULL or a size below the first release's struct.
int stream_words_to_c(const StreamWords &w, ds4tp_stream_words *out, Error &err);
// The same check, before anything starts.
int check_words_out(const ds4tp_stream_words *out, Error &err);

}  // namespace ds4tp::capi
