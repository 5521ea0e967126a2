#pragma once
// Umbrella header: the whole library. Prefer the narrower headers in a
// translation unit that needs only a part.
#include "ft/version.hpp"
#include "ft/core/dtype.hpp"
#include "ft/core/error.hpp"
#include "ft/models/llama.hpp"
#include "ft/models/gpt_neox.hpp"
#include "ft/precision/precision.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/adapters/adapter.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/recipe/load.hpp"
#include "ft/train/trainer.hpp"
