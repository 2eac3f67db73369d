// Calls made on a signal the caller picks (ds4tp_group_dump_on_signal):
// the handler writes the signal's number to a pipe, which is all it may
// safely do; one library thread ("ds4tp-signal") reads it and makes every
// call registered for that signal.
#pragma once

#include <functional>
#include <string>

namespace ds4tp::os {

// `fn` runs on the signal thread each time the process gets `signo`,
// until forget_signal_calls(key) or another registration under `key`
// (one per key). The handler stays installed for the process's life.
// false with `why` for a signal that cannot be caught, or no pipe.
bool call_on_signal(const void *key, int signo, std::function<void()> fn, std::string &why);
// No call of `key` runs after this returns (one in progress is waited for).
void forget_signal_calls(const void *key);

}  // namespace ds4tp::os
