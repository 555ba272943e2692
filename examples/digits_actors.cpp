// The digits job of examples/digits_ddp with N trainer actors in one process: by default the
// optimizer step is sharded over the actors (Note [Sharded step]), each reducing its part of
// the gradients in shared memory (trainer_spec::zero_redundancy = false takes the reducer and
// the comm actor's buckets instead).
//
//   build/release/examples/digits_actors --actors 4 --out digits-actors [--epochs 30] ...
#include <cstdio>

#include "examples/digits_training.hpp"

int main(int argc, char** argv) try {
  digits::options o = digits::parse(argc, argv, "digits_actors");
  if (o.out == "digits-run")
    o.out = "digits-actors";
  return digits::run(o, nullptr) >= 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "digits_actors: %s\n", e.what());
  return 1;
}
