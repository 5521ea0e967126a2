#pragma once
// A policy outside ft's stock list, as it declares itself: an optimizer's
// state bytes per trainable parameter under an f32 master and whether that
// state is one value per parameter (optim/optimizer.hpp), as a plugin
// exports them (plugin/abi.h). The estimate of a run with such an optimizer
// is made from these; other kinds of policy declare nothing the estimate
// reads, and a run with one of them is refused in one line.
#include <string>
#include <vector>

namespace ft::estimate {

struct OptimizerDeclaration {
  std::string name;
  double state_bytes = 0;
  bool elementwise_state = false;
};
struct Declarations {
  std::vector<OptimizerDeclaration> optimizers;

  const OptimizerDeclaration* optimizer(const std::string& name) const {
    for (const OptimizerDeclaration& o : optimizers)
      if (o.name == name) return &o;
    return nullptr;
  }
};

}  // namespace ft::estimate
