// Every recipe under recipes/ runs as shipped: `ftrun train RECIPE` for 2
// steps from the repository root, with only output_dir moved. A recipe whose
// model is fetched rather than shipped (SmolLM2, tools/fetch_smollm2.sh) runs
// when that model is present and says so when it is not.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include <toml++/toml.h>

namespace test_recipes {

namespace fs = std::filesystem;

TEST_CASE("every shipped recipe trains for 2 steps as shipped") {
  const fs::path root = FT_SOURCE_DIR;
  const fs::path out = fs::temp_directory_path() / ("ft_recipes_" + std::to_string(::getpid()));
  int trained = 0;
  const fs::path here = fs::current_path();
  fs::current_path(root);  // recipes name their files relative to the repository root
  for (const auto& entry : fs::recursive_directory_iterator(root / "recipes")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string name = fs::relative(entry.path(), root).string();
    CAPTURE(name);
    const fs::path model = root / toml::parse_file(entry.path().string())["model"]["path"].value_or(std::string());
    if (!fs::exists(model / "model.safetensors") && !fs::exists(model / "model.safetensors.index.json")) {
      MESSAGE(name << ": not run here, its model " << model.string() << " is fetched, not shipped");
      continue;
    }
    const fs::path run = out / fs::path(name).replace_extension("");
    const std::string cmd = "cd " + root.string() +
                            " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " FTRUN_PATH
                            " train " + name + " --set train.max_steps=2 --set train.logging_steps=1 --set output_dir=" +
                            run.string() + " >" + (out / "stdout").string() + " 2>" + (out / "stderr").string();
    fs::create_directories(out);
    const int status = std::system(cmd.c_str());
    std::ifstream err(out / "stderr");
    INFO(std::string{std::istreambuf_iterator<char>(err), {}});
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    std::ifstream metrics(run / "metrics.jsonl");
    int steps = 0;
    for (std::string line; std::getline(metrics, line);)
      if (nlohmann::json::parse(line)["split"] == "train") ++steps;
    CHECK(steps == 2);
    ++trained;
  }
  fs::current_path(here);
  CHECK(trained >= 6);  // the tiny models' recipes are always there
  fs::remove_all(out);
}

}  // namespace test_recipes
