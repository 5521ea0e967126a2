// The packaged headers compile and compose a Trainer type.
#include <ft/ft.hpp>

#include <iostream>

int main() {
  using T = ft::Trainer<ft::models::Llama, ft::precision::BF16Mixed, ft::parallel::Single, ft::optim::AdamW,
                        ft::adapters::LoRA>;
  std::cout << "ft " << FT_VERSION_STRING << ": " << T::type_name() << "\n";
  return T::type_name().empty() ? 1 : 0;
}
