// C structs to library types and back, with the argument checks that go
// with them (ranges, NULL/size pairs, size fields).
#pragma once

#include <cstddef>
#include <string>

#include "common/error.hpp"
#include "ds4tp/ds4tp.h"
#include "pair/pair.hpp"
#include "slab/layout.hpp"
#include "wire/frames.hpp"
#include "wire/hello.hpp"

namespace ds4tp::capi {

// EINVAL naming the bad field; the key is loaded here (psk, psk_file or
// the environment).
int options_from_c(const ds4tp_options *copt, Options &o, Error &err);
int identity_from_c(const ds4tp_identity *cid, wire::Identity &id, Error &err);
// Copies as much of `l` as the caller's struct holds (out->size).
void fill_layout(const slab::Layout &l, ds4tp_slab_layout *out);
// Text a call hands out into the caller's buf of cap bytes, NUL-terminated,
// and its length into *needed (when not NULL): EINVAL for a NULL buf with
// cap > 0, ENOMEM naming both sizes when it does not fit (buf untouched).
int text_to_c(const std::string &text, char *buf, size_t cap, size_t *needed, const char *call,
              Error &err);

// The C batch item and the wire one share one layout, so arrays pass
// through without copies.
static_assert(sizeof(ds4tp_batch_item) == sizeof(wire::BatchItem));
static_assert(offsetof(ds4tp_batch_item, session_id) == offsetof(wire::BatchItem, session));
static_assert(offsetof(ds4tp_batch_item, token) == offsetof(wire::BatchItem, token));
static_assert(offsetof(ds4tp_batch_item, flags) == offsetof(wire::BatchItem, flags));
inline const wire::BatchItem *wire_items(const ds4tp_batch_item *items) {
  return reinterpret_cast<const wire::BatchItem *>(items);
}
inline ds4tp_batch_item *c_items(const wire::BatchItem *items) {
  return reinterpret_cast<ds4tp_batch_item *>(const_cast<wire::BatchItem *>(items));
}

}  // namespace ds4tp::capi
