// A linear or mixed-integer program built row by row and solved by COIN-OR CBC (Debian's
// coinor-libcbc-dev; a solver is what a library does better than we would). The oracle's exact
// model (residency_model.cc) and the timed bound's channel program (timed_program.cc) are built
// on it. Ownership: a value; solve() builds and frees its own CBC model. Thread safety: none
// shared (one program per thread).
#pragma once

#include <map>
#include <utility>
#include <vector>

namespace tensortier::migrator {

// A linear expression over a program's columns: coefficient per column, plus a constant.
struct Expr {
  std::map<int, double> terms;
  double constant = 0;
  Expr& add(int col, double coef) {
    if (col >= 0) terms[col] += coef;
    return *this;
  }
  Expr& add(const Expr& e, double scale) {
    for (const auto& [col, coef] : e.terms) terms[col] += coef * scale;
    constant += e.constant * scale;
    return *this;
  }
};

class LinearProgram {
 public:
  // A column in [lb, ub] costing `objective` a unit (minimised); its index.
  int column(double lb, double ub, double objective = 0, bool integer = false);
  void add_objective(int col, double coef);
  // e (sense: 'L' <=, 'G' >=, 'E' =) rhs; e's constant moves to the right.
  void row(Expr e, char sense, double rhs);
  int rows() const { return static_cast<int>(rows_.size()); }
  int columns() const { return static_cast<int>(cols_.size()); }
  int integers() const;

  struct Solved {
    bool optimal = false, infeasible = false;
    double best_possible = 0;  // no solution's objective is lower (-inf where CBC gave none)
    double objective = 0;      // of x, where x is non-empty
    std::vector<double> x;     // the best solution found; empty: none
    double seconds = 0;        // the solver's wall time
  };
  Solved solve(double time_limit_s) const;

 private:
  struct Col {
    double lb, ub, obj;
    bool integer;
  };
  struct Row {
    Expr e;
    char sense;
    double rhs;
  };
  std::vector<Col> cols_;
  std::vector<Row> rows_;
};

}  // namespace tensortier::migrator
