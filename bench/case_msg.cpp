// A case's names and its wire form on the coordination connection (the
// leader sends every case to the worker as one CASE line), and the lines
// both ranks swap there to open a library handle.
#include "cases.hpp"

#include "ds4tp/ds4tp.h"

namespace bench {

const char *section_name(Section s) {
  switch (s) {
    case Section::Row: return "row";
    case Section::Batch: return "batch";
    case Section::Big: return "big";
    case Section::Token: return "token";
    case Section::Control: return "control";
    case Section::Group: return "group";
  }
  return "?";
}

const char *control_op_name(uint32_t op) { return op == kMtpAck ? "mtp+ack" : "eval+logits"; }

bool section_from_name(const std::string &n, Section &out) {
  for (Section s : {Section::Row, Section::Batch, Section::Big, Section::Token, Section::Control,
                    Section::Group})
    if (n == section_name(s)) {
      out = s;
      return true;
    }
  return false;
}

Msg Case::to_msg() const {
  Msg m;
  m.verb = "CASE";
  std::string pol;
  for (int p : policies) pol += (pol.empty() ? "" : ",") + std::to_string(p);
  m.set("section", section_name(section))
      .set("transport", transport)
      .set("bytes", int64_t(bytes))
      .set("rows", rows)
      .set("layers", layers)
      .set("op", op)
      .set("rounds", rounds)
      .set("iters", iters)
      .set("warm", warm)
      .set("warm_first", warm_first)
      .set("policies", pol);
  std::string modes;
  for (auto &b : big_modes) modes += (modes.empty() ? "" : ",") + b;
  if (!modes.empty()) m.set("big_modes", modes);
  return m;
}

bool Case::from_msg(const Msg &m, Case &c) {
  if (m.verb != "CASE" || !section_from_name(m.get("section"), c.section)) return false;
  c.transport = int(m.num("transport"));
  c.bytes = uint64_t(m.num("bytes"));
  c.rows = uint32_t(m.num("rows", 1));
  c.layers = uint32_t(m.num("layers", 1));
  c.op = uint32_t(m.num("op", 0));
  c.rounds = int(m.num("rounds", 1));
  c.iters = int(m.num("iters", 1));
  c.warm = int(m.num("warm", 0));
  c.warm_first = int(m.num("warm_first", 0));
  c.policies.clear();
  for (auto &p : split(m.get("policies"), ',')) c.policies.push_back(std::stoi(p));
  c.big_modes = split(m.get("big_modes"), ',');
  return c.bytes > 0 && c.bytes % 4 == 0 && c.rows >= 1 && c.layers >= 1 && c.rounds >= 0 &&
         c.iters >= 1;
}

std::string Case::label() const {
  std::string s = std::string(section_name(section)) + " " + ds4tp_transport_name(transport);
  if (section == Section::Batch) return s + " " + std::to_string(rows) + " rows";
  if (section == Section::Token) return s + " " + std::to_string(layers) + " layers";
  if (section == Section::Control) return s + " " + control_op_name(op);
  return s + " " + bytes_label(bytes);
}

Status offer_port(Session &s, const char *verb, const std::string &mine, int port) {
  Msg m;
  m.verb = verb;
  if (!mine.empty()) m.set("why", mine);
  else m.set("port", port);
  return s.coord.send(m);
}

Status take_port(Session &s, const char *verb, const char *what, int &port, std::string &mine) {
  Msg m;
  Status st = s.coord.recv(m, 30000, verb);
  if (!st.ok) return st;
  if (m.kv.count("why")) mine = std::string("the leader could not open its ") + what;
  else port = int(m.num("port"));
  return {};
}

Status agree_open(Session &s, const std::string &mine, std::string &unavailable) {
  Msg my;
  my.verb = "STATUS";
  my.set("ok", mine.empty() ? 1 : 0);
  if (!mine.empty()) my.set("why", mine);
  Msg theirs;
  Status st;
  if (!(st = s.coord.send(my)).ok || !(st = s.coord.recv(theirs, 60000, "STATUS")).ok) return st;
  if (!mine.empty() || theirs.num("ok") != 1)
    unavailable = !mine.empty() ? mine : "peer: " + theirs.get("why");
  return {};
}

}  // namespace bench
