#include "linear_program.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include <Cbc_C_Interface.h>

namespace tensortier::migrator {
namespace {
struct CbcDeleter {
  void operator()(Cbc_Model* m) const { Cbc_deleteModel(m); }
};
}  // namespace

int LinearProgram::column(double lb, double ub, double objective, bool integer) {
  cols_.push_back({lb, ub, objective, integer});
  return static_cast<int>(cols_.size()) - 1;
}

void LinearProgram::add_objective(int col, double coef) {
  cols_.at(static_cast<std::size_t>(col)).obj += coef;
}

void LinearProgram::row(Expr e, char sense, double rhs) {
  const double constant = e.constant;
  rows_.push_back({std::move(e), sense, rhs - constant});
}

int LinearProgram::integers() const {
  return static_cast<int>(std::ranges::count_if(cols_, [](const Col& c) { return c.integer; }));
}

LinearProgram::Solved LinearProgram::solve(double time_limit_s) const {
  Solved out;
  std::unique_ptr<Cbc_Model, CbcDeleter> model(Cbc_newModel());
  Cbc_setLogLevel(model.get(), 0);
  // The matrix in one load, column-major (a row or column at a time through CBC's C interface
  // took most of the channel program's wall time on ResNet-18).
  const std::size_t n = cols_.size();
  std::vector<CoinBigIndex> start(n + 1, 0);
  for (const Row& r : rows_) {
    for (const auto& [c, v] : r.e.terms)
      if (v != 0) ++start[static_cast<std::size_t>(c) + 1];
  }
  for (std::size_t c = 0; c < n; ++c) start[c + 1] += start[c];
  std::vector<int> index(static_cast<std::size_t>(start[n]));
  std::vector<double> value(index.size());
  std::vector<CoinBigIndex> next(start.begin(), start.end() - 1);
  std::vector<double> row_lb(rows_.size()), row_ub(rows_.size());
  constexpr double kInf = std::numeric_limits<double>::max();  // CBC's infinity (COIN_DBL_MAX)
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    for (const auto& [c, v] : r.e.terms) {
      if (v == 0) continue;
      const auto at = static_cast<std::size_t>(next[static_cast<std::size_t>(c)]++);
      index[at] = static_cast<int>(i);
      value[at] = v;
    }
    row_lb[i] = r.sense == 'L' ? -kInf : r.rhs;
    row_ub[i] = r.sense == 'G' ? kInf : r.rhs;
  }
  std::vector<double> col_lb(n), col_ub(n), obj(n);
  for (std::size_t c = 0; c < n; ++c) {
    col_lb[c] = cols_[c].lb;
    col_ub[c] = cols_[c].ub;
    obj[c] = cols_[c].obj;
  }
  Cbc_loadProblem(model.get(), static_cast<int>(n), static_cast<int>(rows_.size()), start.data(),
                  index.data(), value.data(), col_lb.data(), col_ub.data(), obj.data(), row_lb.data(),
                  row_ub.data());
  for (std::size_t c = 0; c < n; ++c)
    if (cols_[c].integer) Cbc_setInteger(model.get(), static_cast<int>(c));
  Cbc_setMaximumSeconds(model.get(), std::max(0.1, time_limit_s));
  Cbc_setAllowableFractionGap(model.get(), 1e-6);
  const auto t0 = std::chrono::steady_clock::now();
  Cbc_solve(model.get());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (integers() == 0) {  // a linear program: CBC solves it once, with no search
    out.optimal = Cbc_isInitialSolveProvenOptimal(model.get()) != 0;
    out.infeasible = Cbc_isInitialSolveProvenPrimalInfeasible(model.get()) != 0;
    if (out.optimal) {
      const double* x = Cbc_getColSolution(model.get());
      out.x.assign(x, x + cols_.size());
      out.objective = out.best_possible = Cbc_getObjValue(model.get());
    } else {
      out.best_possible = -std::numeric_limits<double>::infinity();
    }
    return out;
  }
  out.optimal = Cbc_isProvenOptimal(model.get()) != 0;
  out.infeasible = Cbc_isProvenInfeasible(model.get()) != 0;
  out.best_possible = Cbc_getBestPossibleObjValue(model.get());
  if (!std::isfinite(out.best_possible)) out.best_possible = -std::numeric_limits<double>::infinity();
  if (const double* x = Cbc_bestSolution(model.get()); x != nullptr) {
    out.x.assign(x, x + cols_.size());
    out.objective = Cbc_getObjValue(model.get());
  }
  return out;
}

}  // namespace tensortier::migrator
