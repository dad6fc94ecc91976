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
  for (const Col& c : cols_)
    Cbc_addCol(model.get(), "", c.lb, c.ub, c.obj, c.integer ? 1 : 0, 0, nullptr, nullptr);
  std::vector<int> idx;
  std::vector<double> coef;
  for (const Row& r : rows_) {
    idx.clear();
    coef.clear();
    for (const auto& [c, v] : r.e.terms) {
      if (v == 0) continue;
      idx.push_back(c);
      coef.push_back(v);
    }
    Cbc_addRow(model.get(), "", static_cast<int>(idx.size()), idx.data(), coef.data(), r.sense, r.rhs);
  }
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
