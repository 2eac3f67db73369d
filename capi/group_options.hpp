// The group options conversion (group_options.cpp), apart from the C
// calls so tests can check what a caller's struct turns into.
#pragma once

#include "common/error.hpp"
#include "ds4tp/ds4tp.h"
#include "group/group.hpp"

namespace ds4tp::capi {

// `local`: ds4tp_group_new_local (rank, size and rendezvous not read).
// EINVAL naming the field for a value out of range.
int group_options_from_c(const ds4tp_group_options *copt, const ds4tp_identity *cid, bool local,
                         group::Options &o, Error &err);

}  // namespace ds4tp::capi
