// The `actorch` command line. Each subcommand registers itself from its own file (see
// commands.hpp); errors from actorch become one line on stderr and exit status 1.
#include <iostream>

#include "base/error.hpp"
#include "tools/actorch/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"actorch: an actor-based runtime for deep-learning training"};
  app.require_subcommand(1);
  actorch::cli::add_bench(app);
  actorch::cli::add_launch(app);
  actorch::cli::add_step(app);
  // `actorch launch [OPTIONS] -- PROGRAM`: CLI11 gives what follows the "--" to this level, where
  // launch takes it (Note [Launch programs]); after any other subcommand it is an error below.
  app.allow_extras();

  try {
    app.parse(argc, argv);
    if (!app.got_subcommand("launch") && !app.remaining().empty())
      throw CLI::ExtrasError(app.get_name(), app.remaining());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "actorch: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
