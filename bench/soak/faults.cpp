// The faults ds4tp_soak injects into a child, and how a cycle is judged:
// which outcome each side must come to, and within what bound of the
// moment the fault was sent (soak.hpp).
#include <signal.h>

#include <chrono>

#include "soak.hpp"

namespace soak {

const char *fault_name(Fault f) {
  switch (f) {
    case Fault::None: return "none";
    case Fault::Kill: return "kill";
    case Fault::Stop: return "stop";
    case Fault::Exit: return "exit";
    case Fault::BringupKill: return "bringup-kill";
  }
  return "?";
}

Fault pick_fault(std::mt19937_64 &rng) {
  const int r = int(rng() % 100);
  return r < 30 ? Fault::None : r < 55 ? Fault::Kill : r < 70 ? Fault::Stop
         : r < 85 ? Fault::Exit : Fault::BringupKill;
}

void Injector::start(Fault f, pid_t pid, int delay_ms, int stop_ms) {
  t_ = std::thread([=, this] {
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, std::chrono::milliseconds(delay_ms), [&] { return cancel_; })) return;
    fired_ns_ = now_ns();
    if (f != Fault::Stop) {
      kill(pid, SIGKILL);
      return;
    }
    kill(pid, SIGSTOP);
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(stop_ms));
    kill(pid, SIGCONT);
  });
}

void Injector::cancel() {
  std::lock_guard<std::mutex> lk(mu_);
  cancel_ = true;
  cv_.notify_all();
}

void Injector::join() {
  cancel();
  if (t_.joinable()) t_.join();
}

uint64_t Injector::fired_ns() {
  std::lock_guard<std::mutex> lk(mu_);
  return fired_ns_;
}

namespace {

int fault_bound_ms(Fault f) {
  return f == Fault::Kill ? kKillBoundMs : f == Fault::Stop ? kStopBoundMs : kBringupBoundMs;
}

}  // namespace

void judge_survivor(const char *who, Fault f, const Side &s, uint64_t fired, Verdict &v,
                    double &ms) {
  ms = -1;
  if (f == Fault::None) {
    if (s.rc) v.no(std::string(who) + " failed without a fault: " + code_name(s.rc));
    return;
  }
  if (s.rc == 0) return v.no(std::string(who) + " succeeded despite the fault");
  ms = fired && s.t_err > fired ? double(s.t_err - fired) / 1e6 : 0;
  if (s.rc == kUnnoticed)
    return v.no(std::string(who) + ": the " + fault_name(f) + " went unnoticed, no call failed in " +
                std::to_string(int(ms)) + " ms");
  // A leader killed in bring-up frees its port, and another listener (a
  // group's rendezvous, another test) may take it before the worker's next
  // dial: the worker then names a stranger (EPROTO, "not a ds4tp peer").
  const bool stranger = f == Fault::BringupKill && s.rc == DS4TP_EPROTO;
  if (!named_code(s.rc) && !stranger)
    return v.no(std::string(who) + " ended with " + code_name(s.rc));
  if (f == Fault::Exit) return;  // the child chose its moment: nothing to time
  if (fired == 0) return v.no(std::string(who) + " failed before the fault was injected");
  const int bound = fault_bound_ms(f);
  if (ms > bound)
    v.no(std::string(who) + " took " + std::to_string(int(ms)) + " ms, bound " +
         std::to_string(bound));
}


bool past_bound(Fault f, uint64_t fired, int stop_ms) {
  if (fired == 0 || f == Fault::None || f == Fault::Exit) return false;
  const int ms = fault_bound_ms(f) + (f == Fault::Stop ? stop_ms : 0) + 500;
  return now_ns() > fired + uint64_t(ms) * 1000000ull;
}

void judge_victim(Fault f, int st, const std::string &how, Verdict &v) {
  bool good = f == Fault::None || f == Fault::Exit ? exited_with(st, kExitOk)
              : f == Fault::Stop                   ? exited_with(st, kExitNamed)
                                                   : killed(st);
  if (!good) v.no(std::string("victim child ended ") + how);
}

}  // namespace soak
