// A program outside posenc, built against the installed copy (find_package and pkg-config): it
// checks two values against their closed forms, so that a consumer that links but computes
// nothing (or links the wrong library) fails. Exit status 0 only when both match.
#include <posenc/rope.h>
#include <posenc/sinusoidal.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

bool Near(const char* what, double got, double want) {
  const bool ok = std::fabs(got - want) <= 1e-6 * (1 + std::fabs(want));
  std::printf("%s = %.7f (closed form %.7f)%s\n", what, got, want, ok ? "" : "  MISMATCH");
  return ok;
}

}  // namespace

int main() {
  bool ok = true;

  // Sinusoidal table [4096, 64]: large enough for the threaded SIMD path. PE(p, 0) = sin(p),
  // PE(p, 1) = cos(p) (column pair 0 has frequency 1).
  const int64_t tokens = 4096, dim = 64;
  std::vector<float> table(tokens * dim);
  posenc::FillSinusoidalTable(posenc::Sinusoidal{.dim = dim}, tokens, table);
  ok &= Near("PE(1, 0)", table[1 * dim + 0], std::sin(1.0));
  ok &= Near("PE(1000, 1)", table[1000 * dim + 1], std::cos(1000.0));

  // RoPE, head_dim 4, half-split: pairs (x0, x2) at frequency 1 and (x1, x3) at 1/100, so
  // position 3 turns them by 3 and 0.03 radians.
  std::vector<float> x = {1, 2, 3, 4};
  const std::vector<int64_t> positions = {3};
  posenc::ApplyRope(posenc::Rope::Default(4), positions,
                    posenc::Heads<float>::Dense(x.data(), 1, 1, 4));
  ok &= Near("rope x0", x[0], 1 * std::cos(3.0) - 3 * std::sin(3.0));
  ok &= Near("rope x2", x[2], 1 * std::sin(3.0) + 3 * std::cos(3.0));
  ok &= Near("rope x1", x[1], 2 * std::cos(0.03) - 4 * std::sin(0.03));
  ok &= Near("rope x3", x[3], 2 * std::sin(0.03) + 4 * std::cos(0.03));

  std::printf("%s\n", ok ? "consumer: all values match" : "consumer: MISMATCH");
  return ok ? 0 : 1;
}
