// posenc rope: apply a model's RoPE, read from its Hugging Face config.json, to a .npy tensor.
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "model_rope.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/npy.h"
#include "posenc/rope.h"

namespace posenc::cli {

void AddRopeCommand(CLI::App& app) {
  struct Options {
    ModelRopeOptions model;
    std::string input;
    std::string output;
    std::string layout;  // "" = the model's
  };
  auto options = std::make_shared<Options>();
  CLI::App* rope = app.add_subcommand(
      "rope", "Rotate a .npy tensor [tokens, heads, head_dim] with a config.json's RoPE");
  rope->footer(
      "The input is float32, one position per token; cos and sin are multiplied by the "
      "attention factor, as Hugging Face does. --layer picks the layer (a type or an index); "
      "a layer that does not rotate (NoPE) is an error. head_dim is the full q/k head: "
      "DeepSeek's 192 rotate features [128, 192) only.");
  options->model.AddTo(rope, "default: max(--positions) + 1");
  rope->add_option("--input", options->input, "Input .npy, float32 [tokens, heads, head_dim]")
      ->required();
  rope->add_option("--output", options->output, "Output .npy (same shape)")->required();
  rope->add_option("--layout", options->layout,
                   "half-split pairs (i, i + rotary_dim/2) (GPT-NeoX, Llama in Hugging Face) or "
                   "interleaved pairs (2i, 2i+1) (GPT-J, RoFormer); default: the model's")
      ->check(CLI::IsMember({"half-split", "interleaved"}));
  rope->callback([options] {
    Require(!options->model.positions.empty(), "rope", "--positions", "be given", "nothing");
    const ModelPositions described = LoadModelPositions(options->model.config);
    const auto* rope_scheme = std::get_if<RopeScheme>(&described.scheme);
    Require(rope_scheme != nullptr, "rope", "config", "describe a RoPE model",
            options->model.config);
    ModelRopeOptions model = options->model;
    // Hugging Face's forward uses max(position_ids) + 1 for dynamic and longrope.
    if (!model.seq_len) model.seq_len = SeqLenOf(model.positions);
    RopeScheme with_layout = *rope_scheme;
    if (!options->layout.empty()) {
      with_layout.layout =
          options->layout == "interleaved" ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
    }
    const Rope rope_params = MakeRope(with_layout, model.Layer(described), model.Frequencies());

    // The output is as large as the input: check the file's size before reading it.
    std::error_code no_size;
    const auto input_bytes = std::filesystem::file_size(options->input, no_size);
    if (!no_size) model.limit.Check("rope", "--input", static_cast<double>(input_bytes), 1);
    NpyArray x = ReadNpy(options->input, static_cast<uint64_t>(model.limit.bytes));
    Require(x.shape.size() == 3, "rope", "--input", "have shape [tokens, heads, head_dim]",
            NpyShapeString(x.shape));
    Require(x.shape[2] == rope_params.head_dim, "rope", "--input",
            "have head_dim " + std::to_string(rope_params.head_dim) + " (from the config)",
            NpyShapeString(x.shape));
    Require(static_cast<int64_t>(model.positions.size()) == x.shape[0], "rope", "--positions",
            "give one position per token (" + std::to_string(x.shape[0]) + ")",
            model.positions.size());
    ApplyRope(rope_params, model.positions,
              Heads<float>::Dense(x.data.data(), x.shape[0], x.shape[1], x.shape[2]));
    WriteNpy(options->output, x.data, x.shape);
  });
}

}  // namespace posenc::cli
