#include "matrix.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "stats.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/enum_names.h"

namespace tensortier::bench {

using nlohmann::json;

nlohmann::json to_json(const MatrixConfig& c) {
  return json{{"models", c.models},       {"policies", c.policies},     {"budgets", c.budgets},
              {"specs", c.specs},         {"batch", c.batch},           {"image_size", c.image_size},
              {"width", c.width},         {"steps", c.steps},           {"warmup", c.warmup},
              {"reps", c.reps},           {"numactl", c.numactl},       {"fast_node", c.fast_node},
              {"slow_node", c.slow_node}, {"emulate_as", c.emulate_as}, {"trace_policy", c.trace_policy},
              {"mover_cpu", c.mover_cpu}, {"backend", c.backend},       {"math", c.math}};
}

Result<MatrixConfig> config_from_json(const nlohmann::json& j) {
  try {
    MatrixConfig c;
    j.at("models").get_to(c.models);
    j.at("policies").get_to(c.policies);
    j.at("budgets").get_to(c.budgets);
    j.at("specs").get_to(c.specs);
    j.at("batch").get_to(c.batch);
    j.at("image_size").get_to(c.image_size);
    j.at("width").get_to(c.width);
    j.at("steps").get_to(c.steps);
    j.at("warmup").get_to(c.warmup);
    j.at("reps").get_to(c.reps);
    j.at("numactl").get_to(c.numactl);
    j.at("fast_node").get_to(c.fast_node);
    j.at("slow_node").get_to(c.slow_node);
    j.at("emulate_as").get_to(c.emulate_as);
    j.at("trace_policy").get_to(c.trace_policy);
    c.mover_cpu = j.value("mover_cpu", -1);  // results written before --mover-core have none
    c.backend = j.value("backend", "cpu");   // nor before --backend
    c.math = j.value("math", "fp32");        // nor before --math
    return c;
  } catch (const json::exception& e) {
    return invalid_argument(fmt::format("a matrix config that is not tensortier-bench's: {}", e.what()));
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

namespace {

std::optional<std::vector<TierConfig>> parsed(const std::string& spec) {
  auto configs = parse_tier_spec(spec);
  if (!configs || configs.value().empty()) return std::nullopt;
  return std::move(configs).value();
}

}  // namespace

bool spec_is_emulated(const std::string& spec) {
  return !spec_preset(spec).empty();
}

std::string spec_preset(const std::string& spec) {
  auto configs = parsed(spec);
  if (!configs) return "";
  for (const TierConfig& t : *configs) {
    if (t.kind == TierKind::kEmulated) return t.preset;
  }
  return "";
}

int spec_slow_node(const std::string& spec) {
  auto configs = parsed(spec);
  return configs && configs->back().kind == TierKind::kNuma ? configs->back().numa_node : -1;
}

int spec_fast_node(const std::string& spec) {
  auto configs = parsed(spec);
  return configs && configs->front().kind == TierKind::kNuma ? configs->front().numa_node : -1;
}

std::string tiers_label(const std::string& spec) {
  const std::string preset = spec_preset(spec);
  return preset.empty() ? spec : "emulated " + preset;
}

std::string first_real_spec(const std::vector<std::string>& specs) {
  const auto it = std::ranges::find_if(specs, [](const std::string& s) { return !spec_is_emulated(s); });
  return it != specs.end() ? *it : "";
}

constexpr EnumName<TaskKind> kTaskKindNames[] = {
    {TaskKind::kPolicies, "policies"},
    {TaskKind::kNumactl, "numactl"},
    {TaskKind::kEmulationCheck, "emulation-check"},
};

const char* to_string(TaskKind kind) {
  return name_of(kind, kTaskKindNames, "?").data();  // the table's names are literals: NUL-terminated
}

nlohmann::json to_json(const Task& t) {
  return json{{"id", t.id},     {"kind", to_string(t.kind)}, {"model", t.model},
              {"spec", t.spec}, {"budget", t.budget},        {"numactl", t.numactl},
              {"rep", t.rep},   {"policies", t.policies},    {"trace", t.trace}};
}

Result<Task> task_from_json(const nlohmann::json& j) {
  try {
    Task t;
    j.at("id").get_to(t.id);
    const std::string kind = j.at("kind").get<std::string>();
    const std::optional<TaskKind> named = value_named(kind, kTaskKindNames);
    if (!named)
      return invalid_argument(
          fmt::format("unknown task kind '{}' (known: {})", kind, names_of(kTaskKindNames)));
    t.kind = *named;
    j.at("model").get_to(t.model);
    j.at("spec").get_to(t.spec);
    j.at("budget").get_to(t.budget);
    j.at("numactl").get_to(t.numactl);
    j.at("rep").get_to(t.rep);
    j.at("policies").get_to(t.policies);
    j.at("trace").get_to(t.trace);
    return t;
  } catch (const json::exception& e) {
    return invalid_argument(fmt::format("a task that is not tensortier-bench's: {}", e.what()));
  }
}

namespace {

std::string task_id(const Task& t) {
  return fmt::format("{}|{}|{}|{}|{}|rep{}", to_string(t.kind), t.model, t.spec, t.budget, t.numactl, t.rep);
}

}  // namespace

std::vector<Task> expand(const MatrixConfig& c) {
  // One repetition's tasks, in matrix order.
  std::vector<Task> one;
  for (const std::string& model : c.models) {
    for (const std::string& spec : c.specs) {
      for (const std::string& budget : c.budgets) {
        one.push_back(Task{"", TaskKind::kPolicies, model, spec, budget, "", 0, c.policies, false});
      }
    }
    for (const std::string& mode : c.numactl) {
      // Every tensor on plain DRAM mappings, which follow the process's numactl policy.
      one.push_back(Task{"", TaskKind::kNumactl, model, "fast=dram", "", mode, 0, {"fast-only"}, false});
    }
    if (!c.emulate_as.empty()) {
      one.push_back(Task{"",
                         TaskKind::kEmulationCheck,
                         model,
                         "fast=dram,slow=emulated:" + c.emulate_as,
                         "",
                         "",
                         0,
                         {"fast-only", "slow-only"},
                         false});
    }
  }
  std::vector<Task> all;
  for (int rep = 0; rep < c.reps; ++rep) {
    // Rotated by the repetition: each task has other neighbours each time round.
    const std::size_t shift = one.empty() ? 0 : static_cast<std::size_t>(rep) % one.size();
    for (std::size_t i = 0; i < one.size(); ++i) {
      Task t = one[(i + shift) % one.size()];
      t.rep = rep;
      t.id = task_id(t);
      all.push_back(std::move(t));
    }
  }
  // The traced task: the first model and spec at the last budget listed, first repetition.
  if (!c.trace_policy.empty() && !c.models.empty() && !c.specs.empty() && !c.budgets.empty() &&
      std::ranges::find(c.policies, c.trace_policy) != c.policies.end()) {
    for (Task& t : all) {
      if (t.kind == TaskKind::kPolicies && t.rep == 0 && t.model == c.models.front() &&
          t.spec == c.specs.front() && t.budget == c.budgets.back()) {
        t.trace = true;
        break;
      }
    }
  }
  return all;
}

std::vector<Task> pending(const std::vector<Task>& all, const nlohmann::json& done) {
  std::vector<Task> out;
  for (const Task& t : all) {
    if (!done.is_object() || !done.contains(t.id)) out.push_back(t);
  }
  return out;
}

namespace {

double number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The fast-only step time of a model's policies tasks on the first real spec, by repetition
// (median over its budgets): the reference of rows measured in other processes.
std::map<int, double> real_reference(const MatrixConfig& c, const json& tasks, const std::string& model,
                                     const char* policy) {
  const std::string real = first_real_spec(c.specs);
  std::map<int, std::vector<double>> by_rep;
  for (const auto& [id, t] : tasks.items()) {
    if (t.value("kind", "") != "policies" || t.value("model", "") != model || t.value("spec", "") != real)
      continue;
    const json& runs = t.at("runs");
    if (runs.contains(policy) && runs.contains("fast-only")) {
      by_rep[t.value("rep", 0)].push_back(std::string_view(policy) == "fast-only"
                                              ? number(runs.at("fast-only"), "median_ms")
                                              : number(runs.at(policy), "median_ms") /
                                                    number(runs.at("fast-only"), "median_ms"));
    }
  }
  std::map<int, double> out;
  for (auto& [rep, v] : by_rep) out[rep] = median(v);
  return out;
}

}  // namespace

// The highest 1-minute load average recorded around these tasks (each task's "load_average": at its
// start and end); -1 where none recorded one (results of an older bench).
double highest_load(const std::vector<const json*>& tasks) {
  double highest = -1;
  for (const json* t : tasks) {
    if (!t->contains("load_average") || !t->at("load_average").is_array()) continue;
    for (const json& l : t->at("load_average"))
      if (l.is_number()) highest = std::max(highest, l.get<double>());
  }
  return highest;
}

// The largest |x / median - 1| of the values (0 for fewer than two).
double largest_departure(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double m = median(values);
  double largest = 0;
  for (double x : values) largest = std::max(largest, m > 0 ? std::abs(x / m - 1.0) : 0.0);
  return largest;
}

nlohmann::json summarize(const MatrixConfig& c, const nlohmann::json& tasks) {
  json cells = json::array(), numactl = json::array(), checks = json::array();
  // Policies cells, in matrix order.
  for (const std::string& model : c.models) {
    for (const std::string& spec : c.specs) {
      for (const std::string& budget : c.budgets) {
        std::vector<const json*> found;  // this group's finished tasks, one per repetition
        for (const auto& [id, t] : tasks.items()) {
          if (t.value("kind", "") == "policies" && t.value("model", "") == model &&
              t.value("spec", "") == spec && t.value("budget", "") == budget && t.contains("runs") &&
              t.at("runs").contains("fast-only")) {
            found.push_back(&t);
          }
        }
        if (found.empty()) continue;
        std::vector<double> floors, bounds, timed_bounds;
        const double load = highest_load(found);
        for (const json* t : found) {
          const double f = number(t->at("runs").at("fast-only"), "median_ms");
          double slow_floor = 0, timed = 0;
          for (const auto& [p, r] : t->at("runs").items()) {
            slow_floor = std::max(slow_floor, number(r, "floor_slow_ms"));
            // The oracle's exact-model bound on what a plan adds, over the plan's own compute
            // (every cell of the group carries it).
            if (r.contains("bound_extra_ms") && number(r, "compute_ms") > 0)
              bounds.push_back(1.0 + number(r, "bound_extra_ms") / number(r, "compute_ms"));
            // The timed bound (timed_bound.h): each run's, from its own profile; the task's
            // largest (the tightened program runs on one of them), then the median over tasks.
            if (r.contains("timed_bound_ms") && number(r, "compute_ms") > 0 && p != "fast-only")
              timed = std::max(timed, 1.0 + number(r, "timed_bound_ms") / number(r, "compute_ms"));
          }
          if (timed > 0) timed_bounds.push_back(timed);
          floors.push_back(f > 0 ? std::max(f, slow_floor) / f : 1.0);
        }
        std::map<std::string, double> ratio_of;
        for (const std::string& policy : c.policies) {
          std::map<std::string, std::vector<double>> v;
          for (const json* t : found) {
            const json& runs = t->at("runs");
            if (!runs.contains(policy)) continue;
            const json& r = runs.at(policy);
            const double f = number(runs.at("fast-only"), "median_ms");
            v["median_ms"].push_back(number(r, "median_ms"));
            v["ratio"].push_back(f > 0 ? number(r, "median_ms") / f : 0.0);
            if (r.contains("predicted_extra_ms") && number(r, "compute_ms") > 0)
              v["predicted"].push_back(1.0 + number(r, "predicted_extra_ms") / number(r, "compute_ms"));
            for (const char* k : {"in_mib", "out_mib", "copied_mib", "late_dropped", "failed", "mover_cpu_ms",
                                  "charge_ms", "slow_mib", "fast_peak_mib", "faults", "tlb_shootdowns"}) {
              v[k].push_back(number(r, k));
            }
          }
          if (v.empty()) continue;
          json cell{{"model", model},
                    {"spec", spec},
                    {"tiers", tiers_label(spec)},
                    {"emulated", spec_is_emulated(spec)},
                    {"budget", budget},
                    {"policy", policy},
                    {"reps", v["ratio"].size()},
                    {"floor", median(floors)}};
          if (!bounds.empty()) cell["bound"] = median(bounds);
          if (!timed_bounds.empty()) cell["timed_bound"] = median(timed_bounds);
          // The tightest valid bound (the exact model's or the timed one, tightened where it ran).
          const double tightest = std::max(bounds.empty() ? 1.0 : median(bounds),
                                           timed_bounds.empty() ? 1.0 : median(timed_bounds));
          if (tightest > 1.0) cell["tightest_bound"] = tightest;
          if (load >= 0) cell["load"] = load;
          // A repetition off its siblings' median by more than kDisagreement: something else was
          // running then, or the cell is noise; flagged, not dropped.
          const double spread = largest_departure(v["ratio"]);
          cell["spread"] = spread;
          if (v["ratio"].size() >= 2 && spread > kDisagreement) cell["disagreeing"] = true;
          for (auto& [k, values] : v) cell[k] = median(values);
          ratio_of[policy] = cell["ratio"].get<double>();
          // What the policy adds over fast-only against what no plan can avoid adding.
          if (tightest > 1.0 && policy != "fast-only")
            cell["over_bound"] = (cell["ratio"].get<double>() - 1.0) / (tightest - 1.0);
          if (c.mover_cpu >= 0) cell["mover_cpu"] = c.mover_cpu;
          if (c.backend != "cpu") cell["backend"] = c.backend;
          cells.push_back(std::move(cell));
        }
        // Penalty shares: how much of slow-only's penalty a policy pays.
        if (auto s = ratio_of.find("slow-only"); s != ratio_of.end() && s->second > 1.0) {
          for (json& cell : cells) {
            if (cell["model"] == model && cell["spec"] == spec && cell["budget"] == budget &&
                cell["policy"] != "fast-only" && cell["policy"] != "slow-only") {
              cell["penalty_share"] = (cell["ratio"].get<double>() - 1.0) / (s->second - 1.0);
            }
          }
        }
      }
    }
    // numactl rows: against fast-only of the same repetition on the first real spec.
    const std::map<int, double> fast_ms = real_reference(c, tasks, model, "fast-only");
    for (const std::string& mode : c.numactl) {
      std::vector<double> ms, ratios;
      for (const auto& [id, t] : tasks.items()) {
        if (t.value("kind", "") != "numactl" || t.value("model", "") != model ||
            t.value("numactl", "") != mode)
          continue;
        const double m = number(t.at("runs").at("fast-only"), "median_ms");
        ms.push_back(m);
        if (auto f = fast_ms.find(t.value("rep", 0)); f != fast_ms.end() && f->second > 0)
          ratios.push_back(m / f->second);
      }
      if (ms.empty()) continue;
      json row{{"model", model}, {"mode", mode}, {"reps", ms.size()}, {"median_ms", median(ms)}};
      if (!ratios.empty()) row["ratio"] = median(ratios);
      numactl.push_back(std::move(row));
    }
    // Emulation check: the preset's slow-only slowdown beside the real node's.
    if (!c.emulate_as.empty()) {
      const std::map<int, double> measured = real_reference(c, tasks, model, "slow-only");
      std::vector<double> predicted, real;
      for (const auto& [id, t] : tasks.items()) {
        if (t.value("kind", "") != "emulation-check" || t.value("model", "") != model) continue;
        const json& runs = t.at("runs");
        predicted.push_back(number(runs.at("slow-only"), "median_ms") /
                            number(runs.at("fast-only"), "median_ms"));
        if (auto m = measured.find(t.value("rep", 0)); m != measured.end()) real.push_back(m->second);
      }
      if (!predicted.empty()) {
        json row{{"model", model}, {"preset", c.emulate_as}, {"predicted", median(predicted)}};
        if (!real.empty()) row["measured"] = median(real);
        checks.push_back(std::move(row));
      }
    }
  }
  return json{{"cells", cells},           {"numactl", numactl},   {"emulation_checks", checks},
              {"mover_cpu", c.mover_cpu}, {"backend", c.backend}, {"math", c.math}};
}

std::string markdown_tables(const nlohmann::json& summary) {
  // Rows (model, spec, budget) in the order the cells come; columns: the policies.
  std::vector<std::string> policies;
  std::vector<std::tuple<std::string, std::string, std::string>> rows;
  std::map<std::tuple<std::string, std::string, std::string>, std::map<std::string, json>> at;
  for (const json& cell : summary.at("cells")) {
    const std::string p = cell.at("policy");
    if (std::ranges::find(policies, p) == policies.end()) policies.push_back(p);
    auto row = std::make_tuple(cell.at("model").get<std::string>(), cell.at("spec").get<std::string>(),
                               cell.at("budget").get<std::string>());
    if (!at.contains(row)) rows.push_back(row);
    at[row][p] = cell;
  }
  std::string out;
  if (const std::string backend = summary.value("backend", "cpu"); backend != "cpu") {
    out += fmt::format(
        "**Backend {}**, math {}: every policy's layers (fast-only's too) as cuDNN and cuBLAS calls on the "
        "GPU; "
        "the tiers are the GPU's (device memory, pinned host memory), moves copies over its link.\n\n",
        backend, summary.value("math", "fp32"));
  }
  if (const int cpu = summary.value("mover_cpu", -1); cpu >= 0) {
    out += fmt::format(
        "**Mover core**: the mover on CPU {} alone, the layers' threads (every policy's and fast-only's) on "
        "the process's other CPUs; plans weigh moves without the mover's CPU.\n\n",
        cpu);
  }
  if (!rows.empty()) {
    out +=
        "Step time over fast-only (median over repetitions of ratios taken side by side in one process); "
        "in brackets the penalty share, (policy - fast-only) / (slow-only - fast-only). Floor: the step "
        "time no plan can beat, over fast-only. Bound: the oracle's exact model (residency_model.h): no plan "
        "is predicted to run faster than this, over the profiled compute. Timed bound (timed_bound.h): the "
        "same with the slow channel counted in time (tightened: integral at uses, where it ran). In square "
        "brackets: what "
        "the plan predicted; in braces: its added time over the tightest bound's (1.0: no plan adds "
        "less).\n\n";
    out +=
        "Load: the highest 1-minute load average around the row's tasks (a figure near or over the cores "
        "means other work shared them). `!`: a repetition's ratio is more than " +
        fmt::format("{:.0f}", 100 * kDisagreement) + "% off the median of its cell's.\n\n";
    out += "| model | tiers | fast budget | reps | load | fast-only ms | floor | bound | timed bound |";
    for (const std::string& p : policies)
      if (p != "fast-only") out += " " + p + " |";
    out += "\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |";
    for (const std::string& p : policies)
      if (p != "fast-only") out += " --- |";
    out += "\n";
    for (const auto& row : rows) {
      const auto& cells = at[row];
      const json& f = cells.contains("fast-only") ? cells.at("fast-only") : cells.begin()->second;
      const std::string bound =
          f.contains("bound") ? fmt::format("{:.2f}x", f.at("bound").get<double>()) : "";
      const std::string timed =
          f.contains("timed_bound") ? fmt::format("{:.2f}x", f.at("timed_bound").get<double>()) : "";
      const std::string load = f.contains("load") ? fmt::format("{:.1f}", f.at("load").get<double>()) : "";
      out += fmt::format("| {} | {} | {} | {} | {} | {:.1f}{} | {:.2f}x | {} | {} |", std::get<0>(row),
                         f.at("tiers").get<std::string>(), std::get<2>(row), f.at("reps").get<int>(), load,
                         f.value("median_ms", 0.0), f.value("disagreeing", false) ? " !" : "",
                         f.value("floor", 1.0), bound, timed);
      for (const std::string& p : policies) {
        if (p == "fast-only") continue;
        auto it = cells.find(p);
        if (it == cells.end()) {
          out += " |";
          continue;
        }
        const json& c = it->second;
        out += fmt::format(
            " {:.2f}x{}{}{}{} |", c.value("ratio", 0.0), c.value("disagreeing", false) ? " !" : "",
            c.contains("penalty_share") ? fmt::format(" ({:.2f})", c.at("penalty_share").get<double>()) : "",
            c.contains("predicted") ? fmt::format(" [{:.2f}x]", c.at("predicted").get<double>()) : "",
            c.contains("over_bound") ? fmt::format(" {{{:.1f}}}", c.at("over_bound").get<double>()) : "");
      }
      out += "\n";
    }
    out += "\nPer measured step: MiB moved in / out, moves dropped late, failed moves, mover CPU ms\n\n";
    out += "| model | tiers | fast budget |";
    for (const std::string& p : policies)
      if (p != "fast-only" && p != "slow-only") out += " " + p + " |";
    out += "\n| --- | --- | --- |";
    for (const std::string& p : policies)
      if (p != "fast-only" && p != "slow-only") out += " --- |";
    out += "\n";
    for (const auto& row : rows) {
      const auto& cells = at[row];
      out += fmt::format("| {} | {} | {} |", std::get<0>(row),
                         cells.begin()->second.at("tiers").get<std::string>(), std::get<2>(row));
      for (const std::string& p : policies) {
        if (p == "fast-only" || p == "slow-only") continue;
        auto it = cells.find(p);
        if (it == cells.end()) {
          out += " |";
          continue;
        }
        const json& c = it->second;
        out += fmt::format(" {:.0f} / {:.0f}, {:.0f}, {:.0f}, {:.0f} |", c.value("in_mib", 0.0),
                           c.value("out_mib", 0.0), c.value("late_dropped", 0.0), c.value("failed", 0.0),
                           c.value("mover_cpu_ms", 0.0));
      }
      out += "\n";
    }
  }
  if (!summary.at("numactl").empty()) {
    out +=
        "\nnumactl baselines: the whole process under numactl, every tensor on plain DRAM mappings; ratio to "
        "fast-only on the first real spec, measured in another process\n\n| model | numactl | reps | ms | "
        "over fast-only |\n| --- | --- | --- | --- | --- |\n";
    for (const json& r : summary.at("numactl")) {
      out += fmt::format("| {} | {} | {} | {:.0f} | {} |\n", r.at("model").get<std::string>(),
                         r.at("mode").get<std::string>(), r.at("reps").get<int>(), r.value("median_ms", 0.0),
                         r.contains("ratio") ? fmt::format("{:.2f}x", r.at("ratio").get<double>()) : "n/a");
    }
  }
  if (!summary.at("emulation_checks").empty()) {
    out +=
        "\nThe emulation model against the real slow node: slow-only over fast-only\n\n| model | emulated "
        "preset (predicted) | real slow node (measured) |\n| --- | --- | --- |\n";
    for (const json& r : summary.at("emulation_checks")) {
      out += fmt::format(
          "| {} | {}: {:.2f}x | {} |\n", r.at("model").get<std::string>(), r.at("preset").get<std::string>(),
          r.at("predicted").get<double>(),
          r.contains("measured") ? fmt::format("{:.2f}x", r.at("measured").get<double>()) : "n/a");
    }
  }
  return out;
}

std::string csv(const nlohmann::json& summary) {
  static constexpr const char* kColumns[] = {
      "model",         "tiers",        "spec",          "budget",       "policy",    "reps",
      "median_ms",     "ratio",        "penalty_share", "floor",        "bound",     "in_mib",
      "out_mib",       "late_dropped", "failed",        "mover_cpu_ms", "charge_ms", "slow_mib",
      "fast_peak_mib", "copied_mib",   "timed_bound",   "predicted",    "mover_cpu"};
  std::string out;
  for (const char* c : kColumns) out += fmt::format("{}{}", out.empty() ? "" : ",", c);
  out += "\n";
  auto field = [](const json& v) -> std::string {
    if (v.is_null()) return "";
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      // Specs hold commas: quote every text field, doubling inner quotes (RFC 4180).
      std::string q = "\"";
      for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      return q + "\"";
    }
    if (v.is_number_integer()) return std::to_string(v.get<long long>());
    return fmt::format("{:.4f}", v.get<double>());
  };
  for (const json& cell : summary.at("cells")) {
    for (std::size_t i = 0; i < std::size(kColumns); ++i) {
      out += (i == 0 ? "" : ",") + field(cell.value(kColumns[i], json()));
    }
    out += "\n";
  }
  return out;
}

}  // namespace tensortier::bench
