// Packing changes the layout, not the training signal: the same documents,
// packed into shared rows by the batch plan or padded one per row, give the
// same loss of every document and the same gradient of every weight, on a
// real tokenised dataset and a trainable model (tiny Llama, float64).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "support/compare.hpp"
#include <ft/data/batches.hpp>
#include <ft/data/examples.hpp>
#include <ft/text/model_text.hpp>
#include <ft/models/load.hpp>

namespace test_packing {

namespace fs = std::filesystem;
using namespace ft;

namespace {

const fs::path model_dir = fs::path(FT_SOURCE_DIR) / "tests/fixtures/train/tiny_llama";

// Each example's summed loss, read from the logits of one batch that holds every example.
std::map<std::int64_t, double> document_losses(const data::BatchPlan& plan, const models::Batch& batch,
                                               const std::vector<double>& logits, index_t V) {
  std::map<std::int64_t, double> out;
  const std::vector<std::int64_t> order = plan.order(0);
  for (index_t b = 0; b < batch.B; ++b) {
    index_t at = b * batch.T;
    for (std::int64_t e : plan.row_examples(order[std::size_t(b)])) {
      double loss = 0;
      const index_t end = at + index_t(plan.corpus().length(e));
      for (; at < end; ++at) {
        const std::int32_t target = batch.targets[std::size_t(at)];
        if (target == -100) continue;
        const double* row = logits.data() + at * V;
        double top = row[0], sum = 0;
        for (index_t v = 1; v < V; ++v) top = std::max(top, row[v]);
        for (index_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
        loss += top + std::log(sum) - row[target];
      }
      out[e] = loss;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("packing: the same documents packed or padded give the same per-document losses and gradients") {
  const text::ModelText text = text::ModelText::load(model_dir);
  data::ExampleOptions options;
  options.max_seq_length = 128;
  data::Examples examples = data::read_examples(fs::path(FT_SOURCE_DIR) / "tests/fixtures/train/jargon_small.jsonl",
                                                text.tokenizer.get(), text.chat.get(), text.special, options);
  examples.rows.resize(12);
  auto model = models::load_pretrained<double>(model_dir);
  const index_t V = model->config().vocab_size;

  struct Result {
    double loss;
    std::map<std::int64_t, double> documents;
    std::vector<float> gradients;
    index_t rows;
  };
  auto run = [&](bool packing) {
    // One batch of all rows (rows_per_batch is the plan's row count); packed rows of 512 hold several examples.
    const data::BatchPlan probe(examples.rows, 1, 512, packing, text.pad_id, 3);
    const data::BatchPlan plan(examples.rows, probe.rows(), 512, packing, text.pad_id, 3);
    REQUIRE(plan.batches_per_epoch() == 1);
    const models::Batch batch = plan.batch(0);
    std::vector<double> logits(std::size_t(batch.rows() * V));
    model->zero_grads();
    const double count = double(batch.scored_tokens());
    Result r;
    r.loss = model->forward_backward(batch, {.token_count = count}, logits.data()) / count;
    r.documents = document_losses(plan, batch, logits, V);
    for (const auto& w : model->spec().weights) {
      const auto g = model->hf_gradient(w.hf_name);
      r.gradients.insert(r.gradients.end(), g.begin(), g.end());
    }
    r.rows = batch.B;
    return r;
  };
  const Result padded = run(false), packed = run(true);
  CHECK(packed.rows < padded.rows);  // packing did put several documents in a row
  CHECK(packed.loss == doctest::Approx(padded.loss).epsilon(1e-12));
  REQUIRE(packed.documents.size() == 12);
  REQUIRE(padded.documents.size() == 12);
  for (const auto& [e, loss] : padded.documents) {
    CAPTURE(e);
    CHECK(packed.documents.at(e) == doctest::Approx(loss).epsilon(1e-10));
  }
  CHECK(ft::testing::relative_error(packed.gradients, padded.gradients) < 1e-6);  // read back as float
}

}  // namespace test_packing
