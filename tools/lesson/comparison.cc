// (j) The four methods side by side.
#include "lesson/section.h"

namespace posenc::lesson {

Section MethodsSideBySide() {
  Section s{.id = "j", .title = "The methods side by side"};
  struct Method {
    const char* name;
    const char* what;
    const char* where;
    const char* models;
    const char* longer;
  };
  const Method methods[] = {
      {"learned", "a trained vector per position", "added to token embeddings", "GPT-2, BERT, OPT",
       "no: no vector past the table"},
      {"sinusoidal", "fixed sin/cos waves per position", "added to token embeddings",
       "original Transformer", "defined, but quality falls fast"},
      {"RoPE", "turns q, k pairs by pos * w_i", "inside attention, on q and k",
       "Llama, Mistral, Qwen, GPT-NeoX, GPT-J, Phi", "with PI / NTK / YaRN stretching"},
      {"ALiBi", "-slope * distance on each score", "inside attention, on scores", "BLOOM, MPT",
       "yes, gracefully (linear penalty)"},
  };
  s.lines.push_back(Format("%-11s %-33s %-29s %-43s %s", "method", "what it does", "where it acts",
                           "models", "longer than trained?"));
  for (const Method& m : methods) {
    s.lines.push_back(
        Format("%-11s %-33s %-29s %-43s %s", m.name, m.what, m.where, m.models, m.longer));
    s.numbers[m.name] = {
        {"what", m.what}, {"where", m.where}, {"models", m.models}, {"extrapolation", m.longer}};
  }
  s.lines.push_back("Absolute schemes tag each token; relative ones (RoPE, ALiBi) make attention");
  s.lines.push_back("scores depend on the distance m - n, which is why they travel further.");
  return s;
}

}  // namespace posenc::lesson
