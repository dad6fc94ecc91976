// tensortier-bench's bookkeeping (bench/matrix.h): the task order, resume, and how task
// measurements become cells. The end-to-end runs are in bench_cli.sh.
#include <gtest/gtest.h>

#include <array>
#include <set>

#include "matrix.h"

namespace tensortier::bench {
namespace {

using nlohmann::json;

MatrixConfig small_matrix() {
  MatrixConfig c;
  c.models = {"mlp", "lenet5"};
  c.policies = {"fast-only", "slow-only", "sentinel"};
  c.budgets = {"50%", "20%"};
  c.specs = {"fast=dram,slow=emulated:optane", "fast=numa:0,slow=numa:1"};
  c.reps = 3;
  c.trace_policy = "sentinel";
  return c;
}

TEST(BenchMatrix, SpecHelpersTellEmulatedFromRealTiers) {
  EXPECT_TRUE(spec_is_emulated("fast=dram:1GiB,slow=emulated:optane-server:2GiB"));
  EXPECT_EQ(spec_preset("fast=dram:1GiB,slow=emulated:optane-server:2GiB"), "optane-server");
  EXPECT_FALSE(spec_is_emulated("fast=numa:0,slow=numa:1"));
  EXPECT_EQ(spec_slow_node("fast=numa:0,slow=numa:1"), 1);
  EXPECT_EQ(spec_fast_node("fast=numa:0,slow=numa:1"), 0);
  EXPECT_EQ(spec_slow_node("fast=dram,slow=daxkmem"), -1);
  EXPECT_EQ(spec_preset("not a spec"), "");
  EXPECT_EQ(tiers_label("fast=dram,slow=emulated:cxl"), "emulated cxl");
  EXPECT_EQ(tiers_label("fast=numa:0,slow=numa:1"), "fast=numa:0,slow=numa:1");
  EXPECT_EQ(
      first_real_spec({"fast=dram,slow=emulated:cxl", "fast=numa:0,slow=numa:1", "fast=dram,slow=daxkmem"}),
      "fast=numa:0,slow=numa:1");
  EXPECT_EQ(first_real_spec({"fast=dram,slow=emulated:cxl"}), "");
  EXPECT_EQ(split_list("a,,b,"), (std::vector<std::string>{"a", "b"}));
}

TEST(BenchMatrix, ConfigAndTasksRoundTripThroughJson) {
  MatrixConfig c = small_matrix();
  c.numactl = {"membind-slow"};
  c.fast_node = 0;
  c.slow_node = 1;
  c.emulate_as = "remote-numa";
  c.mover_cpu = 3;
  c.backend = "cuda";
  auto back = config_from_json(to_json(c));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(to_json(back.value()), to_json(c));
  EXPECT_EQ(back->mover_cpu, 3);
  EXPECT_EQ(back->backend, "cuda");
  json before = to_json(c);
  before.erase("mover_cpu");  // results written before --mover-core
  before.erase("backend");    // and before --backend
  ASSERT_TRUE(config_from_json(before).is_ok());
  EXPECT_EQ(config_from_json(before)->mover_cpu, -1);
  EXPECT_EQ(config_from_json(before)->backend, "cpu");
  for (const Task& t : expand(c)) {
    auto tb = task_from_json(to_json(t));
    ASSERT_TRUE(tb.is_ok());
    EXPECT_EQ(to_json(tb.value()), to_json(t));
  }
  EXPECT_FALSE(config_from_json(json{{"models", 3}}).is_ok());
  EXPECT_FALSE(task_from_json(json{{"id", "x"}, {"kind", "mystery"}}).is_ok());
}

TEST(BenchMatrix, TasksRunRepetitionByRepetitionEachTimeInAnotherOrder) {
  MatrixConfig c = small_matrix();
  c.numactl = {"membind-slow", "interleave"};
  c.emulate_as = "remote-numa";
  const std::vector<Task> tasks = expand(c);
  // Per model: 2 specs x 2 budgets, 2 numactl rows and an emulation check; per repetition.
  const std::size_t per_rep = 2 * (2 * 2 + 2 + 1);
  ASSERT_EQ(tasks.size(), per_rep * 3);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    ids.insert(tasks[i].id);
    EXPECT_EQ(tasks[i].rep, static_cast<int>(i / per_rep)) << "task " << i;
  }
  EXPECT_EQ(ids.size(), tasks.size()) << "every task has its own id";
  // Each repetition holds every group once, but no two repetitions run them in the same order.
  std::vector<std::vector<std::string>> orders(3);
  for (const Task& t : tasks)
    orders[static_cast<std::size_t>(t.rep)].push_back(t.id.substr(0, t.id.rfind('|')));
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  for (auto& o : orders) std::sort(o.begin(), o.end());
  EXPECT_EQ(orders[0], orders[1]);
  EXPECT_EQ(orders[1], orders[2]);
  // Kinds and what runs in them.
  for (const Task& t : tasks) {
    if (t.kind == TaskKind::kPolicies) {
      EXPECT_EQ(t.policies, c.policies);
    }
    if (t.kind == TaskKind::kNumactl) {
      EXPECT_EQ(t.policies, std::vector<std::string>{"fast-only"});
    }
    if (t.kind == TaskKind::kEmulationCheck) {
      EXPECT_EQ(t.spec, "fast=dram,slow=emulated:remote-numa");
      EXPECT_EQ(t.policies, (std::vector<std::string>{"fast-only", "slow-only"}));
    }
  }
  // One traced task: first model, first spec, last budget, first repetition.
  std::vector<const Task*> traced;
  for (const Task& t : tasks)
    if (t.trace) traced.push_back(&t);
  ASSERT_EQ(traced.size(), 1U);
  EXPECT_EQ(traced[0]->model, "mlp");
  EXPECT_EQ(traced[0]->spec, c.specs[0]);
  EXPECT_EQ(traced[0]->budget, "20%");
  EXPECT_EQ(traced[0]->rep, 0);
  c.trace_policy = "oracle";  // not in the matrix: nothing traced
  for (const Task& t : expand(c)) EXPECT_FALSE(t.trace);
}

TEST(BenchMatrix, AResumedRunRunsOnlyTheTasksNotDone) {
  const std::vector<Task> all = expand(small_matrix());
  json done = json::object();
  for (std::size_t i = 0; i < all.size(); i += 3) done[all[i].id] = json{{"runs", json::object()}};
  const std::vector<Task> rest = pending(all, done);
  ASSERT_EQ(rest.size(), all.size() - done.size());
  std::size_t j = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i % 3 == 0) continue;
    ASSERT_LT(j, rest.size());
    EXPECT_EQ(rest[j++].id, all[i].id) << "in the matrix's order";
  }
  EXPECT_EQ(pending(all, json::object()).size(), all.size());
  for (const Task& t : all) done[t.id] = json::object();
  EXPECT_TRUE(pending(all, done).empty());
}

// A finished task as tensortier_bench.cc writes it, with the given median step times.
json task_result(const Task& t, const std::map<std::string, double>& ms) {
  json j = to_json(t);
  for (const auto& [p, m] : ms)
    j["runs"][p] = json{{"median_ms", m}, {"in_mib", m / 10}, {"floor_slow_ms", 0.0}};
  return j;
}

TEST(BenchMatrix, CellsAreMediansOverRepetitionsOfRatiosTakenWithinATask) {
  MatrixConfig c = small_matrix();
  c.models = {"mlp"};
  c.budgets = {"20%"};
  c.specs = {"fast=numa:0,slow=numa:1"};
  c.numactl = {"membind-slow"};
  c.emulate_as = "remote-numa";
  c.fast_node = 0;
  c.slow_node = 1;
  json tasks = json::object();
  // Fast-only drifts from rep to rep (100, 200, 110 ms); the ratios within a task do not.
  const double fast[] = {100, 200, 110};
  const double sentinel[] = {150, 260, 143};  // 1.5x, 1.3x, 1.3x
  for (const Task& t : expand(c)) {
    const double f = fast[t.rep];
    if (t.kind == TaskKind::kPolicies) {
      tasks[t.id] = task_result(t, {{"fast-only", f}, {"slow-only", 3 * f}, {"sentinel", sentinel[t.rep]}});
      // An oracle's bound rides on the run that planned it: 1.10x, 1.20x, 1.12x of its compute.
      tasks[t.id]["runs"]["sentinel"]["compute_ms"] = 100.0;
      tasks[t.id]["runs"]["sentinel"]["bound_extra_ms"] = std::array{10.0, 20.0, 12.0}[t.rep];
      // Its timed bound (1.05x, 1.08x, 1.04x) and its prediction (1.25x, 1.40x, 1.30x).
      tasks[t.id]["runs"]["sentinel"]["timed_bound_ms"] = std::array{5.0, 8.0, 4.0}[t.rep];
      tasks[t.id]["runs"]["sentinel"]["predicted_extra_ms"] = std::array{25.0, 40.0, 30.0}[t.rep];
    } else if (t.kind == TaskKind::kNumactl) {
      tasks[t.id] = task_result(t, {{"fast-only", 2.5 * f}});
    } else {
      tasks[t.id] = task_result(t, {{"fast-only", f}, {"slow-only", 2.8 * f}});
    }
  }
  const json s = summarize(c, tasks);
  ASSERT_EQ(s.at("cells").size(), 3U);
  const json* sent = nullptr;
  for (const json& cell : s.at("cells"))
    if (cell.at("policy") == "sentinel") sent = &cell;
  ASSERT_NE(sent, nullptr);
  EXPECT_EQ(sent->at("reps"), 3);
  EXPECT_NEAR(sent->at("ratio").get<double>(), 1.3, 1e-9) << "the median of 1.5, 1.3, 1.3";
  EXPECT_NEAR(sent->at("median_ms").get<double>(), 150, 1e-9);
  EXPECT_NEAR(sent->at("penalty_share").get<double>(), 0.3 / 2.0, 1e-9) << "slow-only is 3x";
  EXPECT_NEAR(sent->at("in_mib").get<double>(), 15, 1e-9);
  EXPECT_EQ(sent->at("tiers"), "fast=numa:0,slow=numa:1");
  ASSERT_EQ(s.at("numactl").size(), 1U);
  EXPECT_NEAR(s.at("numactl")[0].at("ratio").get<double>(), 2.5, 1e-9)
      << "against the same repetition's fast-only";
  ASSERT_EQ(s.at("emulation_checks").size(), 1U);
  EXPECT_NEAR(s.at("emulation_checks")[0].at("predicted").get<double>(), 2.8, 1e-9);
  EXPECT_NEAR(s.at("emulation_checks")[0].at("measured").get<double>(), 3.0, 1e-9);

  const std::string table = markdown_tables(s);
  EXPECT_NEAR(sent->at("bound").get<double>(), 1.12, 1e-9) << "the median of 1.10, 1.20, 1.12";
  EXPECT_NEAR(sent->at("timed_bound").get<double>(), 1.05, 1e-9) << "the median of 1.05, 1.08, 1.04";
  EXPECT_NEAR(sent->at("predicted").get<double>(), 1.30, 1e-9) << "the median of 1.25, 1.40, 1.30";
  EXPECT_NEAR(sent->at("tightest_bound").get<double>(), 1.12, 1e-9)
      << "the exact model's, over the timed 1.05";
  EXPECT_NEAR(sent->at("over_bound").get<double>(), 0.30 / 0.12, 1e-9)
      << "added 0.30 against the bound's 0.12";
  EXPECT_NE(
      table.find(
          "| mlp | fast=numa:0,slow=numa:1 | 20% | 3 |  | 110.0 | 1.00x | 1.12x | 1.05x | 3.00x {16.7} | "
          "1.30x (0.15) [1.30x] {2.5} |"),
      std::string::npos)
      << table;
  EXPECT_NE(table.find("| mlp | membind-slow | 3 |"), std::string::npos) << table;
  EXPECT_NE(table.find("remote-numa: 2.80x | 3.00x |"), std::string::npos) << table;

  // CSV: one header and one row per cell, specs quoted (they hold commas), same column count.
  const std::string text = csv(s);
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(text.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 4U);
  auto columns = [](const std::string& line) {
    std::size_t n = 1;
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) ++n;
    }
    return n;
  };
  for (const std::string& l : lines) EXPECT_EQ(columns(l), columns(lines[0])) << l;
  EXPECT_NE(text.find("\"fast=numa:0,slow=numa:1\""), std::string::npos);
}

TEST(BenchMatrix, CellsCarryTheirTasksLoadAndFlagARepetitionOffItsSiblings) {
  // Three repetitions: sentinel at 1.3x, 1.3x and 2.0x (a repetition measured while something else
  // ran: load 3.5 on its way), slow-only steady. The sentinel cell is flagged, slow-only's is not,
  // and the row carries the highest load.
  MatrixConfig c = small_matrix();
  c.models = {"mlp"};
  c.budgets = {"20%"};
  c.policies = {"fast-only", "slow-only", "sentinel"};
  json tasks = json::object();
  const double sentinel[] = {130, 130, 200};
  const double loads[][2] = {{0.2, 0.4}, {0.3, 0.5}, {1.0, 3.5}};
  for (const Task& t : expand(c)) {
    if (t.kind != TaskKind::kPolicies) continue;
    tasks[t.id] = task_result(t, {{"fast-only", 100}, {"slow-only", 300}, {"sentinel", sentinel[t.rep]}});
    tasks[t.id]["load_average"] = {loads[t.rep][0], loads[t.rep][1]};
  }
  const json s = summarize(c, tasks);
  std::map<std::string, json> by_policy;
  for (const json& cell : s.at("cells")) by_policy[cell.at("policy")] = cell;
  ASSERT_TRUE(by_policy.contains("sentinel") && by_policy.contains("slow-only"));
  EXPECT_NEAR(by_policy["sentinel"].at("load").get<double>(), 3.5, 1e-9);
  EXPECT_TRUE(by_policy["sentinel"].value("disagreeing", false));
  EXPECT_NEAR(by_policy["sentinel"].at("spread").get<double>(), 2.0 / 1.3 - 1.0, 1e-9);
  EXPECT_FALSE(by_policy["slow-only"].value("disagreeing", false));
  const std::string table = markdown_tables(s);
  EXPECT_NE(table.find("| 3 | 3.5 | 100.0 |"), std::string::npos) << table;
  EXPECT_NE(table.find("1.30x !"), std::string::npos) << table;
  EXPECT_EQ(table.find("3.00x !"), std::string::npos) << table;
}

TEST(BenchMatrix, EmulatedCellsNameTheirPresetAndMissingRunsLeaveNoCell) {
  MatrixConfig c = small_matrix();
  c.models = {"mlp"};
  c.budgets = {"20%"};
  c.specs = {"fast=dram,slow=emulated:cxl"};
  c.reps = 2;
  json tasks = json::object();
  const std::vector<Task> all = expand(c);
  tasks[all[0].id] = task_result(all[0], {{"fast-only", 10}, {"sentinel", 12}});  // no slow-only ran
  const json s = summarize(c, tasks);
  ASSERT_EQ(s.at("cells").size(), 2U);
  for (const json& cell : s.at("cells")) {
    EXPECT_EQ(cell.at("tiers"), "emulated cxl");
    EXPECT_EQ(cell.at("reps"), 1);
    EXPECT_FALSE(cell.contains("penalty_share")) << "no slow-only: no share";
  }
  EXPECT_NE(markdown_tables(s).find("emulated cxl"), std::string::npos);
  EXPECT_EQ(markdown_tables(s).find("Mover core"), std::string::npos) << "not a mover-core run";
  EXPECT_TRUE(summarize(c, json::object()).at("cells").empty());
}

// A --backend cuda run says so above its tables and in every cell; a cpu run says nothing of it.
TEST(BenchMatrix, ACudaBackendRunIsLabelledInTablesAndCells) {
  MatrixConfig c = small_matrix();
  c.models = {"mlp"};
  c.budgets = {"70%"};
  c.specs = {"fast=cuda:0,slow=pinned:4GiB"};
  c.policies = {"fast-only", "autoswap"};
  c.reps = 1;
  c.backend = "cuda";
  c.math = "tf32";
  json tasks = json::object();
  const std::vector<Task> all = expand(c);
  tasks[all[0].id] = task_result(all[0], {{"fast-only", 10}, {"autoswap", 11}});
  const json s = summarize(c, tasks);
  ASSERT_FALSE(s.at("cells").empty());
  for (const json& cell : s.at("cells")) EXPECT_EQ(cell.value("backend", ""), "cuda");
  EXPECT_NE(markdown_tables(s).find("**Backend cuda**, math tf32"), std::string::npos) << markdown_tables(s);
  auto back = config_from_json(to_json(c));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->math, "tf32") << "the math round-trips through results.json";
  c.backend = "cpu";
  const json cpu = summarize(c, tasks);
  for (const json& cell : cpu.at("cells")) EXPECT_FALSE(cell.contains("backend"));
  EXPECT_EQ(markdown_tables(cpu).find("**Backend"), std::string::npos);
}

// A --mover-core run says so above its tables and in every cell and CSV row (its figures are
// not comparable with a default run's).
TEST(BenchMatrix, AMoverCoreRunIsLabelledInTablesCellsAndCsv) {
  MatrixConfig c = small_matrix();
  c.models = {"mlp"};
  c.budgets = {"20%"};
  c.specs = {"fast=dram,slow=emulated:cxl"};
  c.reps = 1;
  c.mover_cpu = 1;
  json tasks = json::object();
  const std::vector<Task> all = expand(c);
  tasks[all[0].id] = task_result(all[0], {{"fast-only", 10}, {"sentinel", 12}});
  const json s = summarize(c, tasks);
  ASSERT_FALSE(s.at("cells").empty());
  for (const json& cell : s.at("cells")) EXPECT_EQ(cell.value("mover_cpu", -1), 1);
  EXPECT_NE(markdown_tables(s).find("**Mover core**: the mover on CPU 1 alone"), std::string::npos)
      << markdown_tables(s);
  const std::string text = csv(s);
  EXPECT_NE(text.find(",mover_cpu\n"), std::string::npos) << "the header's last column";
  EXPECT_NE(text.find(",1\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tensortier::bench
