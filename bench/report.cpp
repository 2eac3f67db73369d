#include "report.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <sys/stat.h>

#include <fmt/format.h>

#include "ds4tp/ds4tp.h"
#include "stats.hpp"

namespace bench {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Line {
  const CaseResult *cr;
  const VariantResult *v;
  Summary sum;
  double vs_p50 = kNaN, vs_p99 = kNaN;  // time ratios against the faster raw variant
  double gbps_p50 = kNaN, gbps_best = kNaN, tput_vs_raw = kNaN;  // big gates
};

struct CaseLines {
  const CaseResult *cr;
  std::vector<Line> lines;
  double raw_p50 = kNaN, raw_p99 = kNaN;  // faster raw variant, per statistic
};

std::string ratio(double r) { return std::isnan(r) ? "-" : fmt::format("{:.2f}x", r); }
std::string num(double v, int prec = 1) {
  return std::isnan(v) ? "-" : fmt::format("{:.{}f}", v, prec);
}
std::string csvnum(double v) { return std::isnan(v) ? "" : fmt::format("{:.3f}", v); }

CaseLines build(CaseResult &cr) {
  CaseLines cl;
  cl.cr = &cr;
  for (auto &v : cr.variants) {
    Line l;
    l.cr = &cr;
    l.v = &v;
    l.sum = summarize(v.ns);
    if (!v.lib && !v.reference && l.sum.n > 0) {
      if (std::isnan(cl.raw_p50) || l.sum.p50 < cl.raw_p50) cl.raw_p50 = l.sum.p50;
      if (std::isnan(cl.raw_p99) || l.sum.p99 < cl.raw_p99) cl.raw_p99 = l.sum.p99;
    }
    cl.lines.push_back(l);
  }
  for (auto &l : cl.lines) {
    if (l.sum.n == 0) continue;
    if (!std::isnan(cl.raw_p50)) l.vs_p50 = l.sum.p50 / cl.raw_p50;
    if (!std::isnan(cl.raw_p99)) l.vs_p99 = l.sum.p99 / cl.raw_p99;
    if (cr.c.section == Section::Big) {
      // Bytes each way over the exchange time: both directions move that
      // many bytes at once, so this is the rate per direction.
      l.gbps_p50 = double(cr.c.bytes) / (l.sum.p50 * 1e3);
      l.gbps_best = double(cr.c.bytes) / (l.sum.min * 1e3);
      if (!std::isnan(cl.raw_p50)) l.tput_vs_raw = cl.raw_p50 / l.sum.p50;
    }
  }
  return cl;
}

const CaseLines *find(const std::vector<CaseLines> &all, Section s, int transport,
                      uint64_t bytes) {
  for (auto &cl : all)
    if (cl.cr->c.section == s && cl.cr->c.transport == transport && !cl.cr->unavailable &&
        (bytes == 0 || cl.cr->c.bytes == bytes))
      return &cl;
  return nullptr;
}

void latency_table(std::string &o, const std::vector<CaseLines> &all, Section sec) {
  bool any = false;
  for (auto &cl : all) any |= cl.cr->c.section == sec && !cl.cr->unavailable;
  if (!any) return;
  const char *col = "size";
  if (sec == Section::Row) {
    o += "\n== Row gate: one vector each way, latency per exchange in us (leader's clock)\n";
  } else if (sec == Section::Batch) {
    o += "\n== Batch gate: 1..8 rows of 16 KiB each way, latency per exchange in us\n";
    col = "rows";
  } else if (sec == Section::Group) {
    o += "\n== Group all-reduce: one f32 vector in place, 2 ranks (ds4tp_group_all_reduce), "
         "against one raw exchange of the same bytes, in us\n";
  } else {
    o += "\n== Control round trip: a command frame to the worker and its reply, on the "
         "control connection, in us\n";
    col = "frames";
  }
  o += fmt::format("{:<6} {:>11} {:<20} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
                   "medium", col, "variant", "n", "p50", "p90", "p99", "p999", "max",
                   "/raw p50", "/raw p99");
  for (auto &cl : all) {
    if (cl.cr->c.section != sec || cl.cr->unavailable) continue;
    std::string what = sec == Section::Row || sec == Section::Group ? bytes_label(cl.cr->c.bytes)
                       : sec == Section::Batch ? std::to_string(cl.cr->c.rows)
                                               : control_op_name(cl.cr->c.op);
    for (auto &l : cl.lines)
      o += fmt::format(
          "{:<6} {:>11} {:<20} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
          ds4tp_transport_name(cl.cr->c.transport), what, l.v->name, l.sum.n,
          num(l.sum.p50), num(l.sum.p90), num(l.sum.p99), num(l.sum.p999), num(l.sum.max),
          ratio(l.vs_p50), ratio(l.vs_p99));
    if (!cl.cr->why.empty()) o += "       note: " + cl.cr->why + "\n";
  }
}

void big_table(std::string &o, const std::vector<CaseLines> &all) {
  bool any = false;
  for (auto &cl : all) any |= cl.cr->c.section == Section::Big && !cl.cr->unavailable;
  if (!any) return;
  o += "\n== Big gate: one payload each way; GB/s per direction (1 GB = 1e9 bytes)\n";
  o += fmt::format("{:<6} {:>8} {:<28} {:>4} {:>10} {:>10} {:>10} {:>12}\n", "medium", "size",
                   "variant", "n", "ms p50", "GB/s p50", "GB/s best", "lib/raw GB/s");
  for (auto &cl : all) {
    if (cl.cr->c.section != Section::Big || cl.cr->unavailable) continue;
    for (auto &l : cl.lines)
      o += fmt::format("{:<6} {:>8} {:<28} {:>4} {:>10} {:>10} {:>10} {:>12}\n",
                       ds4tp_transport_name(cl.cr->c.transport), bytes_label(cl.cr->c.bytes),
                       l.v->name, l.sum.n, num(l.sum.p50 / 1000.0, 2), num(l.gbps_p50, 2),
                       num(l.gbps_best, 2), ratio(l.tput_vs_raw));
  }
}

void token_table(std::string &o, const std::vector<CaseLines> &all) {
  bool any = false;
  for (auto &cl : all) any |= cl.cr->c.section == Section::Token && !cl.cr->unavailable;
  if (!any) return;
  o += "\n== Token loop: 2 gates x N layers of 16 KiB per token, no compute: transport "
       "time per token\n";
  o += fmt::format("{:<6} {:>6} {:<20} {:>5} {:>10} {:>10} {:>10} {:>9} {:>12}\n", "medium",
                   "layers", "variant", "n", "us/tok p50", "us/tok p99", "us/gate", "/raw p50",
                   "+us/tok");
  for (auto &cl : all) {
    if (cl.cr->c.section != Section::Token || cl.cr->unavailable) continue;
    double gates = 2.0 * cl.cr->c.layers;
    for (auto &l : cl.lines)
      o += fmt::format("{:<6} {:>6} {:<20} {:>5} {:>10} {:>10} {:>10} {:>9} {:>12}\n",
                       ds4tp_transport_name(cl.cr->c.transport), cl.cr->c.layers, l.v->name,
                       l.sum.n, num(l.sum.p50), num(l.sum.p99), num(l.sum.p50 / gates, 2),
                       ratio(l.vs_p50),
                       std::isnan(cl.raw_p50) ? "-" : num(l.sum.p50 - cl.raw_p50));
  }
  o += "  +us/tok: library time per token minus the faster raw baseline's (p50).\n";
}

std::string verdict(double r, double limit) {
  if (std::isnan(r)) return "n/a (no baseline)";
  if (r <= limit) return fmt::format("{:.3f}x  met", r);
  return fmt::format("{:.3f}x  MISSED by {:.1f}%", r, (r / limit - 1.0) * 100.0);
}

void targets(std::string &o, const std::vector<CaseLines> &all, uint64_t headline) {
  o += "\n== Targets (lib/raw against the faster raw variant of the same run)\n";
  bool any = false;
  if (auto *cl = find(all, Section::Row, DS4TP_TRANSPORT_TCP, headline)) {
    for (auto &l : cl->lines) {
      if (!l.v->lib) continue;
      any = true;
      o += fmt::format("tcp gate {} {:<20} p50 <= 1.05x: {:<24} p99 <= 1.25x: {}\n",
                       bytes_label(headline), l.v->name, verdict(l.vs_p50, 1.05),
                       verdict(l.vs_p99, 1.25));
    }
  }
  if (auto *cl = find(all, Section::Row, DS4TP_TRANSPORT_SHM, headline)) {
    for (auto &l : cl->lines) {
      if (!l.v->lib) continue;
      any = true;
      o += fmt::format("shm gate {} {:<20} p50 <= raw copy2: {}\n", bytes_label(headline),
                       l.v->name, verdict(l.vs_p50, 1.0));
    }
  }
  if (auto *cl = find(all, Section::Group, DS4TP_TRANSPORT_TCP, headline)) {
    for (auto &l : cl->lines) {
      if (!l.v->lib) continue;
      any = true;
      o += fmt::format("tcp all-reduce {} N=2 {:<20} p50 <= 1.10x one raw exchange: {}\n",
                       bytes_label(headline), l.v->name, verdict(l.vs_p50, 1.10));
    }
  }
  for (auto &cl : all) {  // every control op measured (eval+logits, mtp+ack)
    if (cl.cr->c.section != Section::Control || cl.cr->unavailable) continue;
    for (auto &l : cl.lines) {
      if (!l.v->lib) continue;
      any = true;
      o += fmt::format("tcp control {:<11} {:<20} p50 <= 1.10x: {}\n",
                       control_op_name(cl.cr->c.op), l.v->name, verdict(l.vs_p50, 1.10));
    }
  }
  for (int t : {DS4TP_TRANSPORT_TCP, DS4TP_TRANSPORT_SHM}) {
    const CaseLines *big = nullptr;
    for (auto &cl : all)
      if (cl.cr->c.section == Section::Big && cl.cr->c.transport == t && !cl.cr->unavailable &&
          (!big || cl.cr->c.bytes > big->cr->c.bytes))
        big = &cl;
    if (!big) continue;
    for (auto &l : big->lines) {
      if (!l.v->lib) continue;
      any = true;
      double inv = std::isnan(l.tput_vs_raw) ? kNaN : 1.0 / l.tput_vs_raw;
      o += fmt::format("{} big gate {} {:<20} GB/s >= raw: {:.2f} vs {:.2f} GB/s, time {}\n",
                       ds4tp_transport_name(t), bytes_label(big->cr->c.bytes), l.v->name,
                       l.gbps_p50, double(big->cr->c.bytes) / (big->raw_p50 * 1e3),
                       verdict(inv, 1.0));
    }
  }
  if (!any) o += "(no case measured a target)\n";
}

Status write_file(const std::string &path, const std::string &text) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) return Status::fail("cannot write " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return Status::fail("cannot write " + path + ": " + std::strerror(errno));
  return {};
}

}  // namespace

Status write_report(const ReportConfig &cfg, std::vector<CaseResult> &results) {
  std::vector<CaseLines> all;
  for (auto &cr : results) all.push_back(build(cr));

  std::string o = cfg.preamble;
  for (auto &s : cfg.skipped) o += s + "\n";
  latency_table(o, all, Section::Row);
  latency_table(o, all, Section::Batch);
  big_table(o, all);
  token_table(o, all);
  latency_table(o, all, Section::Control);
  latency_table(o, all, Section::Group);
  targets(o, all, cfg.headline_bytes);
  std::fputs(o.c_str(), stdout);
  std::fflush(stdout);

  if (mkdir(cfg.out_dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::fail("cannot create " + cfg.out_dir + ": " + std::strerror(errno));
  Status st = write_file(cfg.out_dir + "/table.txt", o);
  if (!st.ok) return st;

  std::string csv =
      "section,transport,bytes,rows,layers,op,variant,spin_us,samples,p50_us,p90_us,p99_us,"
      "p999_us,max_us,mean_us,min_us,vs_raw_p50,vs_raw_p99,gbps_p50,gbps_best,tput_vs_raw\n";
  for (auto &cl : all)
    for (auto &l : cl.lines)
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                         section_name(cl.cr->c.section),
                         ds4tp_transport_name(cl.cr->c.transport), cl.cr->c.bytes,
                         cl.cr->c.rows, cl.cr->c.layers,
                         cl.cr->c.section == Section::Control ? control_op_name(cl.cr->c.op)
                                                              : "",
                         l.v->name,
                         l.v->lib ? std::to_string(l.v->spin_us) : "", l.sum.n,
                         csvnum(l.sum.p50), csvnum(l.sum.p90), csvnum(l.sum.p99),
                         csvnum(l.sum.p999), csvnum(l.sum.max), csvnum(l.sum.mean),
                         csvnum(l.sum.min), csvnum(l.vs_p50), csvnum(l.vs_p99),
                         csvnum(l.gbps_p50), csvnum(l.gbps_best), csvnum(l.tput_vs_raw));
  if (!(st = write_file(cfg.out_dir + "/results.csv", csv)).ok) return st;

  // Every recorded sample of the headline row gate, for the CDF plot.
  std::string samples = "transport,variant,us\n";
  for (auto &cl : all) {
    if (cl.cr->c.section != Section::Row || cl.cr->c.bytes != cfg.headline_bytes) continue;
    for (auto &l : cl.lines)
      for (uint64_t ns : l.v->ns)
        samples += fmt::format("{},{},{:.3f}\n", ds4tp_transport_name(cl.cr->c.transport),
                               l.v->name, double(ns) / 1000.0);
  }
  return write_file(cfg.out_dir + "/samples-16k.csv", samples);
}

}  // namespace bench
